package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/chanlimit/chanlimit"
	"github.com/chanlimit/chanlimit/otellimit"
)

// observers are the ways a router may observe its decisions, beside none
// (impl chanlimit) and the floor: an Observe that does nothing, and
// LogDecisions to a handler that writes to io.Discard at Info (so its
// grants are asked whether Debug is on, and its denials are formatted);
// and otellimit's Observer on the OpenTelemetry SDK's MeterProvider,
// with a ManualReader that is never read (no span: the context has none).
var observers = []impl{
	{"chanlimit", newChanlimit},
	{"observe-noop", func(tb testing.TB, p policy) limiter {
		return newChanlimitWith(tb, chanlimit.Config{Limit: p.limit, Window: p.window, Observe: func(context.Context, chanlimit.Event) {}})
	}},
	{"observe-slog", func(tb testing.TB, p policy) limiter {
		l := slog.New(slog.NewTextHandler(io.Discard, nil))
		return newChanlimitWith(tb, chanlimit.Config{Limit: p.limit, Window: p.window, Observe: chanlimit.LogDecisions(l)})
	}},
	{"observe-otel", func(tb testing.TB, p policy) limiter {
		observe, err := otellimit.Observer(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
		if err != nil {
			tb.Fatal(err)
		}
		return newChanlimitWith(tb, chanlimit.Config{Limit: p.limit, Window: p.window, Observe: observe})
	}},
	{"floor", newFloor},
}

// BenchmarkObserve: Allow on 1,000 keys with each observer, granted
// (admit) and denied (deny), sequentially and in parallel.
func BenchmarkObserve(b *testing.B) {
	for _, p := range []policy{admitAll, denyMost} {
		for _, parallelism := range []int{0, 1} {
			mode := map[int]string{0: "seq", 1: "par"}[parallelism]
			for _, im := range observers {
				b.Run(fmt.Sprintf("limit=%s/mode=%s/impl=%s", p.name, mode, im.name), func(b *testing.B) {
					benchAllow(b, im, p, keys(1000), parallelism)
				})
			}
		}
	}
}
