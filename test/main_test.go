package test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// cairnBin is the binary under test, built once by TestMain.
var cairnBin string

// raceEnabled is set when the tests run with -race (race_test.go).
var raceEnabled bool

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "cairn-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test: temporary directory:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cairnBin = filepath.Join(dir, "cairn")
	if err := buildCairn(cairnBin); err != nil {
		fmt.Fprintln(os.Stderr, "test:", err)
		return 1
	}
	return m.Run()
}

// buildCairn builds ./cmd/cairn of this module into out.
func buildCairn(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build cairn: %w", err)
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/cairn")
	cmd := exec.Command(goTool, args...)
	cmd.Dir = root
	start := time.Now()
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %v in %s: %v\n%s", args, root, err, output)
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "test: built %s (race=%v) in %v\n", out, raceEnabled, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
