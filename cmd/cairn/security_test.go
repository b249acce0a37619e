package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnmq/cairn/client"
)

// The caller's --password-file and the new user's are told apart by where
// they stand: before the command's name it is the caller's, after it the
// subcommand's (cairn user create and passwd); the lines that worked
// before (the caller's password from the environment, or --password-file
// after a command that has none of its own) work as they did.
func TestClientOptions_PasswordFileBeforeAndAfterTheCommand(t *testing.T) {
	dir := t.TempDir()
	file := func(name, pw string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	admin, app := file("admin.pw", "admin-password"), file("app.pw", "app-password")
	cases := []struct {
		name      string
		env       map[string]string
		args      []string
		login     string // the password the caller authenticates with
		newFile   string // user create's --password-file
		wantError string
	}{
		{name: "both on the command line", args: []string{"--user", "admin", "--password-file", admin, "user", "create", "app", "--password-file", app}, login: "admin-password", newFile: app},
		{name: "with =", args: []string{"--user=admin", "--password-file=" + admin, "user", "create", "app", "--password-file=" + app}, login: "admin-password", newFile: app},
		{name: "--server first", args: []string{"--server", "127.0.0.1:1", "--user", "admin", "--password-file", admin, "user", "passwd", "app", "--password-file", app}, login: "admin-password", newFile: app},
		{name: "the caller's from the environment", env: map[string]string{"CAIRN_USER": "admin", "CAIRN_PASSWORD_FILE": admin}, args: []string{"user", "create", "app", "--password-file", app}, login: "admin-password", newFile: app},
		{name: "the command line over the environment", env: map[string]string{"CAIRN_PASSWORD_FILE": app}, args: []string{"--user", "admin", "--password-file", admin, "queue", "list"}, login: "admin-password"},
		{name: "after a command without its own", args: []string{"queue", "list", "--user", "admin", "--password-file", admin}, login: "admin-password"},
		{name: "before and after a command without its own", args: []string{"--user", "admin", "--password-file", admin, "queue", "list", "--password-file", app}, wantError: "--password-file given twice"},
		{name: "no password for the caller", args: []string{"--user", "admin", "user", "create", "app", "--password-file", app}, wantError: "--user admin needs a password"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"CAIRN_USER", "CAIRN_PASSWORD_FILE", "CAIRN_PASSWORD"} {
				v, ok := c.env[k]
				t.Setenv(k, v) // restored after the test
				if !ok {
					os.Unsetenv(k)
				}
			}
			root := newRoot()
			cmd, rest, err := root.Find(globalPasswordFile(root, c.args))
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatal(err)
			}
			var o client.Options
			err = root.PersistentPreRunE(cmd, nil)
			if err == nil {
				o, err = clientOptions(cmd)
			}
			if c.wantError != "" {
				if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), c.wantError) {
					t.Fatalf("clientOptions: %v; want an invalid argument saying %q", err, c.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.User != "admin" || o.Password != c.login {
				t.Errorf("the caller: %q with %q; want admin with %q", o.User, o.Password, c.login)
			}
			if c.newFile != "" {
				if got, _ := cmd.Flags().GetString("password-file"); got != c.newFile {
					t.Errorf("the new password's file: %q; want %q", got, c.newFile)
				}
			}
		})
	}
}
