// A known hot function for the native sampler's live tests; built with go build (Go has no
// .eh_frame: unwinding goes through its compressed .debug_frame).
package main

import (
	"os"
	"syscall"
	"time"
)

//go:noinline
func hot(n int) float64 {
	x := 0.0
	for i := 0; i < n; i++ {
		x += float64(i) * 0.5 / (1.0 + float64(i&7)) // HOT
	}
	return x
}

// cpuTime is the process's CPU time (not wall time: the machine may be busy).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:noinline
func compute(d time.Duration) float64 {
	start := cpuTime()
	s := 0.0
	for cpuTime()-start < d {
		s += hot(200000)
	}
	return s
}

func main() {
	time.Sleep(300 * time.Millisecond) // SLEEP
	if compute(600*time.Millisecond) <= 0 {
		os.Exit(1)
	}
}
