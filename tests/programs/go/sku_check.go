// sku_check: a small JSON API that checks product codes, with net/http/pprof's endpoints, for
// profiling a live Go server over its own /debug/pprof/profile:
//
//	onefix report 'http://127.0.0.1:PORT/debug/pprof/profile?seconds=5'
//
// Planted mistake: the code's regular expression is compiled on every request (the line whose
// comment says CULPRIT) instead of once at package level. Expected: repeated-setup
// (regex-compile) at rank 1.
//
// Standard library only (no module downloads): go build -o sku_check sku_check.go
// Listens on 127.0.0.1 (port 0 unless given), prints its address, and exits after 120 s.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"regexp"
	"strings"
	"time"
)

// Codes look like `DE-ELEC-00042-b`: a country, a department, a number and a variant.
var countries = []string{"AT", "BE", "CH", "CZ", "DE", "DK", "ES", "FI", "FR", "GB", "GR", "HU", "IE",
	"IT", "LU", "NL", "NO", "PL", "PT", "RO", "SE", "SI", "SK", "US", "CA", "MX", "BR", "JP", "KR", "AU"}
var departments = []string{"ELEC", "HOME", "GARD", "TOYS", "FOOD", "BOOK", "SPRT", "AUTO", "BEAU", "HLTH"}

var pattern = `^(?:` + strings.Join(countries, "|") + `)-(?:` + strings.Join(departments, "|") +
	`)-(\d{3,8})(?:-([a-z]{1,3}))?(?:/(?:new|used|refurbished))?$`

type answer struct {
	SKU   string `json:"sku"`
	Valid bool   `json:"valid"`
}

func validSKU(sku string) bool {
	re := regexp.MustCompile(pattern) // CULPRIT
	return re.MatchString(sku)
}

func check(w http.ResponseWriter, r *http.Request) {
	sku := r.URL.Query().Get("sku")
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer{SKU: sku, Valid: validSKU(sku)})
}

func main() {
	port := "0"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	// Never outlives a test that forgot it.
	time.AfterFunc(120*time.Second, func() { os.Exit(0) })
	http.HandleFunc("/check", check)
	http.Serve(ln, nil)
}
