// Fake crypto exchanges for the exchange-aggregator lab case: one HTTP server on 127.0.0.1
// answering GET /exchanges/N/book with exchange N's order book for a pair as JSON, after that
// exchange's latency (a fixed per-exchange base between -min-delay and -max-delay, plus a
// little jitter), the way a real exchange API answers a depth request.
//
//	exchanges --port-file FILE [--exchanges 12] [--levels 400] [--min-delay-ms 5] [--max-delay-ms 20]
//
// Writes the port it listens on to FILE once it accepts connections. Exits when its parent
// (the lab's run script) is gone, so it never outlives the case.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

type level struct {
	Price  float64 `json:"price"`
	Amount float64 `json:"amount"`
	Orders int     `json:"orders"`
}

type book struct {
	Exchange  string  `json:"exchange"`
	Pair      string  `json:"pair"`
	Timestamp int64   `json:"timestamp"`
	Sequence  int64   `json:"sequence"`
	Bids      []level `json:"bids"`
	Asks      []level `json:"asks"`
}

type exchange struct {
	delay time.Duration
	body  []byte
}

func makeBook(rng *rand.Rand, name string, levels int) []byte {
	mid := 37000 + rng.Float64()*200
	spread := 0.5 + rng.Float64()*3
	b := book{Exchange: name, Pair: "BTC-USDT", Timestamp: 1700000000000, Sequence: rng.Int63n(1 << 40)}
	for i := 0; i < levels; i++ {
		step := float64(i) * (0.01 + rng.Float64()*0.5)
		b.Bids = append(b.Bids, level{Price: mid - spread/2 - step, Amount: rng.Float64() * 3, Orders: 1 + rng.Intn(20)})
		b.Asks = append(b.Asks, level{Price: mid + spread/2 + step, Amount: rng.Float64() * 3, Orders: 1 + rng.Intn(20)})
	}
	body, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return body
}

func main() {
	portFile := flag.String("port-file", "", "write the port to this file once listening")
	count := flag.Int("exchanges", 12, "number of exchanges")
	levels := flag.Int("levels", 1000, "price levels per side of each book")
	minDelay := flag.Int("min-delay-ms", 5, "fastest exchange's latency")
	maxDelay := flag.Int("max-delay-ms", 20, "slowest exchange's latency")
	flag.Parse()

	rng := rand.New(rand.NewSource(1))
	exchanges := make([]exchange, *count)
	for i := range exchanges {
		frac := 0.0
		if *count > 1 {
			frac = float64(i) / float64(*count-1)
		}
		ms := float64(*minDelay) + frac*float64(*maxDelay-*minDelay)
		exchanges[i] = exchange{delay: time.Duration(ms * float64(time.Millisecond)), body: makeBook(rng, fmt.Sprintf("exchange-%d", i+1), *levels)}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/exchanges/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) != 3 || parts[2] != "book" {
			http.NotFound(w, r)
			return
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > len(exchanges) {
			http.NotFound(w, r)
			return
		}
		ex := exchanges[n-1]
		// Up to 10% jitter on the exchange's latency, as a real API varies.
		time.Sleep(ex.delay + time.Duration(rand.Int63n(int64(ex.delay)/10+1)))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(ex.body)))
		w.Write(ex.body)
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "exchanges:", err)
		os.Exit(1)
	}
	parent := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != parent {
				os.Exit(0)
			}
		}
	}()
	if *portFile != "" {
		port := ln.Addr().(*net.TCPAddr).Port
		if err := os.WriteFile(*portFile, []byte(strconv.Itoa(port)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "exchanges:", err)
			os.Exit(1)
		}
	}
	http.Serve(ln, mux)
}
