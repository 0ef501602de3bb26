// A fixed amount of CPU work in Go with PARKED goroutines waiting on a channel the whole time,
// for the goroutine sampler's overhead benchmark (bench/run-go). Prints the process's own CPU
// time in seconds on its first line (getrusage: other load on the machine does not count).
//
//	go_work ROUNDS PARKED
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

//go:noinline
func work(n int) float64 {
	x := 0.0
	for i := 0; i < n; i++ {
		x += float64(i) * 0.5 / (1.0 + float64(i&7))
	}
	return x
}

func main() {
	rounds, _ := strconv.Atoi(os.Args[1])
	parked, _ := strconv.Atoi(os.Args[2])
	never := make(chan int)
	for i := 0; i < parked; i++ {
		go func() { <-never }()
	}
	s := 0.0
	for r := 0; r < rounds; r++ {
		s += work(100000)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("%.3f\n", float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
	if s < 0 {
		close(never)
	}
}
