package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chanlimit/chanlimit/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNoClientSkipsItsLimit: a client that names a fresh tenant, or sends
// a made-up API key, with each request is still under its IP's limit (5 a
// second on a frozen clock); only a key the server knows puts a request
// under its tenant's quota.
func TestNoClientSkipsItsLimit(t *testing.T) {
	handler, _, closeAll, err := newHandler(clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, err)
	defer closeAll()
	srv := httptest.NewServer(handler) // on 127.0.0.1
	defer srv.Close()
	get := func(header, value string) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/hello", nil)
		require.NoError(t, err)
		if header != "" {
			req.Header.Set(header, value)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	rng := rand.New(rand.NewPCG(1, 2))
	served := 0
	for i := range 40 {
		header := []string{"X-Tenant", "X-Api-Key", ""}[i%3]
		if get(header, fmt.Sprint("tenant-", rng.Uint64())) == http.StatusOK {
			served++
		}
	}
	assert.Equal(t, 5, served, "40 requests from one IP, each under a made-up tenant or key")

	served = 0
	for range 60 {
		if get("X-Api-Key", "demo-key-acme") == http.StatusOK {
			served++
		}
	}
	assert.Equal(t, 50, served, "acme's key: acme's quota")
}

// TestOnlyFailedLoginsCount: logins that succeed cost nothing; after 3
// failures in 15 minutes a user's logins are refused, the right password
// too, until the first failure leaves the window.
func TestOnlyFailedLoginsCount(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	handler, _, closeAll, err := newHandler(clk)
	require.NoError(t, err)
	defer closeAll()
	srv := httptest.NewServer(handler) // on 127.0.0.1
	defer srv.Close()
	post := func(user, password string) int {
		resp, err := srv.Client().PostForm(srv.URL+"/login", url.Values{"user": {user}, "password": {password}})
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 10 {
		require.Equal(t, http.StatusNoContent, post("ann", "correct-horse"), "login %d", i)
		clk.Advance(time.Second) // under the per-IP limit of 5 a second
	}
	for i := range 3 {
		require.Equal(t, http.StatusUnauthorized, post("ann", "guess"), "failure %d", i)
		clk.Advance(time.Second)
	}
	assert.Equal(t, http.StatusTooManyRequests, post("ann", "guess"))
	assert.Equal(t, http.StatusTooManyRequests, post("ann", "correct-horse"), "locked out, whatever the password")
	assert.Equal(t, http.StatusUnauthorized, post("bob", "guess"), "another user has failures of his own")
	clk.Advance(15*time.Minute - 3*time.Second)
	assert.Equal(t, http.StatusNoContent, post("ann", "correct-horse"), "the first failure has left the window")
}

// TestOperatorsPage: the admin server's page lists the IP the demo's
// requests were refused for, and what it has left.
func TestOperatorsPage(t *testing.T) {
	handler, admin, closeAll, err := newHandler(clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, err)
	defer closeAll()
	srv := httptest.NewServer(handler) // on 127.0.0.1
	defer srv.Close()
	adminSrv := httptest.NewServer(admin)
	defer adminSrv.Close()
	for range 7 {
		resp, err := srv.Client().Get(srv.URL + "/hello")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	resp, err := adminSrv.Client().Get(adminSrv.URL + "/debug/chanlimit?format=json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var page struct {
		TopDenied []struct {
			Key   string `json:"key"`
			Count int    `json:"count"`
			Left  []struct {
				Policy    string `json:"policy"`
				Remaining int    `json:"remaining"`
			} `json:"left"`
		} `json:"top_denied"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Len(t, page.TopDenied, 1)
	assert.Equal(t, "ip:127.0.0.1", page.TopDenied[0].Key)
	assert.Equal(t, 2, page.TopDenied[0].Count, "7 requests, 5 a second")
	require.Len(t, page.TopDenied[0].Left, 2)
	assert.Equal(t, "per-second", page.TopDenied[0].Left[0].Policy)
	assert.Equal(t, 0, page.TopDenied[0].Left[0].Remaining)
	assert.Equal(t, 55, page.TopDenied[0].Left[1].Remaining, "per-minute: 60, less the 5 granted")

	req, err := http.NewRequest(http.MethodGet, adminSrv.URL+"/debug/chanlimit", nil)
	require.NoError(t, err)
	req.Host = "attacker.example:6060" // a name of the attacker's, led to 127.0.0.1
	resp, err = adminSrv.Client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "only requests for this machine's names")
}
