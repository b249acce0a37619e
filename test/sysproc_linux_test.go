package test

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startServerProcess starts cmd so that the kernel kills it when the test
// process dies (a panic, a -timeout): no server outlives its test run.
//
// Pdeathsig fires when the thread that forked the child exits, not the
// process, so every server is forked from one goroutine locked to its
// thread for the life of the test process.
func startServerProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawner <- func() { done <- cmd.Start() }
	return <-done
}

var spawner = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread()
		for f := range spawner {
			f()
		}
	}()
}
