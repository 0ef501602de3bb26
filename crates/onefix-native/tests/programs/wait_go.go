// Goroutines that wait, for the native sampler's live tests: one goroutine waits 600 ms for a
// reply that never comes (parked by the netpoller, holding no thread), the main goroutine
// waits for it on a WaitGroup, and a server goroutine waits in Accept.
package main

import (
	"net"
	"os"
	"sync"
	"time"
)

//go:noinline
func waitForReply(addr string, d time.Duration) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		os.Exit(2)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1)
	conn.Read(buf) // NETWAIT
}

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept() // ACCEPT
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		waitForReply(ln.Addr().String(), 600*time.Millisecond)
	}()
	wg.Wait() // JOIN
	ln.Close()
}
