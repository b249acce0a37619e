//go:build !linux

package test

import "os/exec"

// startServerProcess starts cmd; elsewhere than on Linux a server may
// outlive a test process that dies without stopping it.
func startServerProcess(cmd *exec.Cmd) error { return cmd.Start() }
