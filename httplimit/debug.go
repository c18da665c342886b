package httplimit

import (
	"context"
	"crypto/sha256"
	_ "embed" // the debug page's template, script and style
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chanlimit/chanlimit"
)

// DebugHandler serves a read-only page of r for its operators: its
// policies, its Stats and each policy's counts (Stats.Policies), and the
// keys it denied most in the last minute (Router.TopDenied) with what each
// has left now under each of its enforced policies (Router.PeekQuota, for
// one unit), and for a key held (Router.Hold: its peek is the denial of
// no policy, with no Limit) that it is held, and how long it is refused
// for: the peek's RetryAfter, the hold's end, or later where the key's
// policies or its line of waiters ask more then. The page is HTML that
// refreshes itself every second and draws a chart of the decisions per
// second since it was opened; a request that prefers application/json to
// text/html (a higher weight in Accept), or has ?format=json, gets the
// same data as JSON. ?n= sets how many keys to list: 10 by default, 100
// at most.
//
// It changes nothing: Stats, TopDenied and PeekQuota only read, a peek
// takes nothing and leaves an unseen key unseen, and nothing it does is
// observed (Config.Observe) or counted, but for one thing: with a Store,
// a peek the store fails counts in Stats.StoreErrors, as any request the
// store fails does. So that the page loads when things go wrong, its
// peeks stop at the first that the store cannot answer, and at a second
// spent on them (the keys not peeked say so).
//
// Keys are client-chosen text: the page escapes them (html/template), its
// script writes them as text, never as markup, and its
// Content-Security-Policy lets no script run but its own, which it serves
// inline with the page (nothing is fetched from elsewhere: no script, no
// style, no font). A key that is not valid UTF-8 of graphic characters
// (a control, a character that turns the text around) is shown in Go's
// quoted form too, so that no key passes for another.
//
// Each load, and each second's refresh while the page is open, takes two
// round trips to every partition (Stats, TopDenied) and one to a key's
// partition for each key listed; with a Store, each peek is a round trip
// to the store too, two for a key that has units left (the peek, and the
// wait for one unit more).
//
// Mount it on an administrative server that only operators reach, never
// on the public one: it lists the keys of your clients (IP addresses, API
// keys) to whoever can load it, and a server on 127.0.0.1 alone is not
// enough where operators browse the web from the same machine (a page
// that rebinds its name to 127.0.0.1 can read it): check the Host field,
// or put authentication in front of it. It answers GET and HEAD (any
// other method is 405), a bad ?n= or ?format= with 400, and a closed
// router with 503.
func DebugHandler(r *chanlimit.Router) http.Handler {
	return debugHandler{router: r}
}

// The debug page's parts, served inline with it.
var (
	//go:embed debug.html
	debugHTML string
	//go:embed debug.js
	debugJS string
	//go:embed debug.css
	debugCSS string

	debugPage = template.Must(template.New("debug").Parse(debugHTML))

	// debugCSP is the page's Content-Security-Policy: its own inline
	// script and style, by their hashes, and fetches of its own JSON;
	// nothing else.
	debugCSP = "default-src 'none'; script-src '" + cspHash(debugJS) + "'; style-src '" + cspHash(debugCSS) +
		"'; connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

// cspHash returns the Content-Security-Policy source that lets an inline
// script or style of exactly s run.
func cspHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

const (
	debugKeys    = 10  // the keys listed when ?n= is not given
	maxDebugKeys = 100 // the most ?n= may ask for
)

type debugHandler struct {
	router *chanlimit.Router
}

func (h debugHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Add("Vary", "Accept")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeProblem(w, problem{Status: http.StatusMethodNotAllowed, Detail: "the debug page only answers GET and HEAD: it changes nothing"})
		return
	}
	q := req.URL.Query()
	n := debugKeys
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > maxDebugKeys {
			writeProblem(w, problem{Status: http.StatusBadRequest, Detail: "n must be a whole number from 0 to " + strconv.Itoa(maxDebugKeys)})
			return
		}
		n = v
	}
	asJSON := false
	switch q.Get("format") {
	case "":
		asJSON = acceptsJSON(req.Header.Values("Accept"))
	case "json":
		asJSON = true
	case "html":
	default:
		writeProblem(w, problem{Status: http.StatusBadRequest, Detail: `format must be "json" or "html"`})
		return
	}
	if h.router == nil {
		WriteError(w, req, errNoRouter)
		return
	}
	v, err := debugViewOf(req.Context(), h.router, n)
	if err != nil {
		WriteError(w, req, err)
		return
	}
	hd.Set("X-Content-Type-Options", "nosniff")
	if asJSON {
		hd.Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v) // the client has gone, if anything
		return
	}
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", debugCSP)
	hd.Set("Referrer-Policy", "no-referrer")
	_ = debugPage.Execute(w, debugPageData{View: v, Script: template.JS(debugJS), Style: template.CSS(debugCSS)})
}

// acceptsJSON says whether the Accept fields prefer application/json to
// text/html: it names it with a weight above 0, and higher than any
// text/html's.
func acceptsJSON(fields []string) bool {
	var jsonQ, htmlQ float64
	for _, f := range fields {
		for _, r := range strings.Split(f, ",") {
			t, params, err := mime.ParseMediaType(strings.TrimSpace(r))
			if err != nil {
				continue
			}
			q := 1.0
			if s, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(s, 64); err != nil || q < 0 || q > 1 {
					continue
				}
			}
			switch t {
			case "application/json":
				jsonQ = max(jsonQ, q)
			case "text/html":
				htmlQ = max(htmlQ, q)
			}
		}
	}
	return jsonQ > 0 && jsonQ > htmlQ
}

// debugPageData is what the page's template is given.
type debugPageData struct {
	View   debugView
	Script template.JS
	Style  template.CSS
}

// debugView is what the page shows, and its JSON form.
type debugView struct {
	N           int                `json:"n"` // the most keys TopDenied was asked for
	Policies    []debugPolicy      `json:"policies"`
	Stats       debugStats         `json:"stats"`
	PolicyStats []debugPolicyStats `json:"policy_stats"`
	TopDenied   []debugKey         `json:"top_denied"`
}

// debugPolicy is a Policy, with the keys of its JSON form.
type debugPolicy struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int    `json:"limit"`
	Window    string `json:"window"`
	Burst     int    `json:"burst,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
}

// debugStats are the router's Stats, without the partitions' own.
type debugStats struct {
	Keys          int    `json:"keys"`
	Idle          int    `json:"idle"`
	Queued        int    `json:"queued"`
	Waiting       int    `json:"waiting"`
	Allowed       uint64 `json:"allowed"`
	Denied        uint64 `json:"denied"`
	Refused       uint64 `json:"refused"`
	WouldDeny     uint64 `json:"would_deny"`
	Panicked      uint64 `json:"panicked"`
	Expired       uint64 `json:"expired"`
	Evicted       uint64 `json:"evicted"`
	Overrides     int    `json:"overrides"`
	StoreErrors   uint64 `json:"store_errors"`
	ObservePanics uint64 `json:"observe_panics"`
	Partitions    int    `json:"partitions"`
}

type debugPolicyStats struct {
	Name      string `json:"name"`
	Denied    uint64 `json:"denied"`
	WouldDeny uint64 `json:"would_deny"`
}

// debugKey is a key TopDenied listed, and what a peek of one unit says it
// has now.
type debugKey struct {
	Key        string       `json:"key"`
	Quoted     string       `json:"quoted,omitempty"` // the key in Go's quoted form, escapes for what is not UTF-8 or not graphic, if it has any such
	Count      uint64       `json:"count"`
	Err        uint64       `json:"err"`
	Allowed    bool         `json:"allowed"`               // whether one unit would be allowed now
	RetryAfter string       `json:"retry_after,omitempty"` // if not, when it would be
	Left       []debugQuota `json:"left"`                  // what each of its policies has, taken alone
	Error      string       `json:"error,omitempty"`       // why the peek failed, if it did (then Allowed and Left say nothing)

	// HeldFor is set if the key is held (Router.Hold): how long it is
	// refused for, the peek's RetryAfter (the hold's end, or later where
	// its policies or its line ask more then).
	HeldFor string `json:"held_for,omitempty"`
}

// debugQuota is what a key has under one of its policies.
type debugQuota struct {
	Policy    string `json:"policy"`
	Remaining int    `json:"remaining"`
	More      string `json:"more,omitempty"` // the wait for one more than Remaining
}

// debugViewOf reads what the page shows from r.
func debugViewOf(ctx context.Context, r *chanlimit.Router, n int) (debugView, error) {
	st, err := r.Stats(ctx)
	if err != nil {
		return debugView{}, err
	}
	top, err := r.TopDenied(ctx, n)
	if err != nil {
		return debugView{}, err
	}
	v := debugView{
		N:        n,
		Policies: debugPolicies(r.Policies()),
		Stats: debugStats{
			Keys: st.Keys, Idle: st.Idle, Queued: st.Queued, Waiting: st.Waiting,
			Allowed: st.Allowed, Denied: st.Denied, Refused: st.Refused, WouldDeny: st.WouldDeny,
			Panicked: st.Panicked, Expired: st.Expired, Evicted: st.Evicted, Overrides: st.Overrides,
			StoreErrors: st.StoreErrors, ObservePanics: st.ObservePanics, Partitions: len(st.Partitions),
		},
		PolicyStats: make([]debugPolicyStats, len(st.Policies)),
		TopDenied:   make([]debugKey, len(top)),
	}
	for i, p := range st.Policies {
		v.PolicyStats[i] = debugPolicyStats{Name: p.Name, Denied: p.Denied, WouldDeny: p.WouldDeny}
	}
	// The peeks share a deadline, and stop at a store that cannot answer:
	// an operator opens the page when things go wrong, and it must load
	// then too, at the cost of one store error a load.
	peeks, cancel := context.WithTimeout(ctx, debugPeekTime)
	defer cancel()
	var q chanlimit.Quota
	notAsked := ""
	for i, k := range top {
		dk := debugKey{Key: k.Key, Count: k.Count, Err: k.Err, Left: []debugQuota{}}
		if !plainKey(k.Key) {
			dk.Quoted = strconv.QuoteToGraphic(k.Key)
		}
		if notAsked != "" {
			dk.Error = notAsked
		} else if err := peek(peeks, r, &dk, &q); err != nil {
			if ctx.Err() != nil {
				return debugView{}, ctx.Err() // the request's own end
			}
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				notAsked = "not peeked: the peeks of this load took " + debugPeekTime.String() + " already"
			case errors.Is(err, chanlimit.ErrStoreUnavailable):
				notAsked = "not peeked: the store could not answer a peek above"
			}
		}
		v.TopDenied[i] = dk
	}
	return v, nil
}

// debugPeekTime is the most a load of the page spends on its peeks.
const debugPeekTime = time.Second

// peek writes into dk what a peek of one unit says its key has now,
// or the peek's error, which it returns too; q is for the router to
// write the quota into.
func peek(ctx context.Context, r *chanlimit.Router, dk *debugKey, q *chanlimit.Quota) error {
	d, err := r.PeekQuota(ctx, dk.Key, 1, q)
	if err != nil {
		dk.Error = err.Error()
		return err
	}
	dk.Allowed = d.Allowed
	if !d.Allowed {
		dk.RetryAfter = d.RetryAfter.String()
	}
	if byHold(d) {
		dk.HeldFor = dk.RetryAfter
	}
	for _, e := range q.Each {
		dq := debugQuota{Policy: q.Policies[e.Policy].Name, Remaining: e.Remaining}
		if e.More > 0 {
			dq.More = e.More.String()
		}
		dk.Left = append(dk.Left, dq)
	}
	return nil
}

// plainKey says whether key reads as what it is: valid UTF-8 of graphic
// characters and spaces only. Another (a byte that is not UTF-8, a
// control, a character that turns the text around) is shown quoted, so
// that no key passes for another.
func plainKey(key string) bool {
	if !utf8.ValidString(key) {
		return false
	}
	for _, c := range key {
		if !unicode.IsGraphic(c) {
			return false
		}
	}
	return true
}

func debugPolicies(ps []chanlimit.Policy) []debugPolicy {
	out := make([]debugPolicy, len(ps))
	for i, p := range ps {
		out[i] = debugPolicy{
			Name:      p.Name, // the router's policies have their names and algorithms, "" made explicit
			Algorithm: p.Algorithm,
			Limit:     p.Limit,
			Window:    p.Window.String(),
			Burst:     p.Burst,
			DryRun:    p.DryRun,
		}
	}
	return out
}
