package promlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/promlimit"
)

func ExampleNew() {
	r, err := chanlimit.New(chanlimit.Config{Limit: 2, Window: time.Second, Partitions: 2})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	for range 3 {
		r.Allow("user-1")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(promlimit.New(r, promlimit.Options{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// What a scrape of /metrics returns (its HELP and TYPE lines left out).
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "chanlimit_") {
			fmt.Println(line)
		}
	}
	// Output:
	// chanlimit_decisions_total{result="allowed"} 2
	// chanlimit_decisions_total{result="denied"} 1
	// chanlimit_decisions_total{result="panicked"} 0
	// chanlimit_decisions_total{result="refused"} 0
	// chanlimit_keys{state="active"} 1
	// chanlimit_keys{state="idle"} 0
	// chanlimit_keys_evicted_total 0
	// chanlimit_keys_expired_total 0
	// chanlimit_observe_panics_total 0
	// chanlimit_overrides 0
	// chanlimit_partition_queued_requests{partition="0"} 0
	// chanlimit_partition_queued_requests{partition="1"} 0
	// chanlimit_policy_denied_total{policy="default"} 1
	// chanlimit_policy_would_deny_total{policy="default"} 0
	// chanlimit_queued_requests 0
	// chanlimit_store_errors_total 0
	// chanlimit_waiting_requests 0
	// chanlimit_would_deny_total 0
}
