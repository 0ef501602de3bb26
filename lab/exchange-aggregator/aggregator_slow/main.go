// Exchange-rate aggregator, slow version (story 001): asks every exchange for its BTC-USDT
// order book, one after another, each through a new HTTP client, decodes the books with
// encoding/json and picks the best bid and ask. Repeats the round ROUNDS times (or until
// MAX_SECONDS) and prints one JSON line with the mean time per round.
//
//	EXCHANGES_URL=http://127.0.0.1:PORT EXCHANGES=12 ROUNDS=40 MAX_SECONDS=30 ./aggregator
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

type Level struct {
	Price  float64 `json:"price"`
	Amount float64 `json:"amount"`
	Orders int     `json:"orders"`
}

type Book struct {
	Exchange  string  `json:"exchange"`
	Pair      string  `json:"pair"`
	Timestamp int64   `json:"timestamp"`
	Sequence  int64   `json:"sequence"`
	Bids      []Level `json:"bids"`
	Asks      []Level `json:"asks"`
}

type Quote struct {
	Exchange string
	Bid, Ask float64
}

func fetchQuote(base string, exchange int) (Quote, error) {
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(fmt.Sprintf("%s/exchanges/%d/book?pair=BTC-USDT&depth=1000", base, exchange))
	if err != nil {
		return Quote{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Quote{}, err
	}
	var book Book
	if err := json.Unmarshal(body, &book); err != nil {
		return Quote{}, err
	}
	return bestOf(book), nil
}

func bestOf(book Book) Quote {
	q := Quote{Exchange: book.Exchange}
	for _, l := range book.Bids {
		if l.Price > q.Bid {
			q.Bid = l.Price
		}
	}
	for i, l := range book.Asks {
		if i == 0 || l.Price < q.Ask {
			q.Ask = l.Price
		}
	}
	return q
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func main() {
	base := os.Getenv("EXCHANGES_URL")
	if base == "" {
		fmt.Fprintln(os.Stderr, "aggregator: set EXCHANGES_URL to the fake exchanges' address")
		os.Exit(2)
	}
	exchanges := envInt("EXCHANGES", 12)
	rounds := envInt("ROUNDS", 40)
	maxTime := time.Duration(envInt("MAX_SECONDS", 30)) * time.Second

	start := time.Now()
	done := 0
	var best Quote
	for done < rounds && time.Since(start) < maxTime {
		quotes := make([]Quote, exchanges)
		errs := make([]error, exchanges)
		for i := 0; i < exchanges; i++ {
			quotes[i], errs[i] = fetchQuote(base, i+1)
		}
		bestBid, bestAsk := Quote{}, Quote{}
		for i, q := range quotes {
			if errs[i] != nil {
				fmt.Fprintln(os.Stderr, "aggregator:", errs[i])
				os.Exit(1)
			}
			if q.Bid > bestBid.Bid {
				bestBid = q
			}
			if bestAsk.Exchange == "" || q.Ask < bestAsk.Ask {
				bestAsk = q
			}
		}
		best = Quote{Exchange: bestBid.Exchange + "/" + bestAsk.Exchange, Bid: bestBid.Bid, Ask: bestAsk.Ask}
		done++
	}
	elapsed := time.Since(start).Seconds()
	fmt.Printf("{\"rounds\": %d, \"exchanges\": %d, \"elapsed_s\": %.3f, \"round_s\": %.5f, \"best\": %q, \"bid\": %.2f, \"ask\": %.2f}\n",
		done, exchanges, elapsed, elapsed/float64(done), best.Exchange, best.Bid, best.Ask)
}
