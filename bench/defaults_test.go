package bench

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/chanlimit/chanlimit"
)

// BenchmarkDefaults: chanlimit's Allow on 1,000 keys for several partition
// counts (as multiples of GOMAXPROCS) and mailbox sizes, sequential and
// with 32 × GOMAXPROCS goroutines: the measurements Config's defaults come
// from.
func BenchmarkDefaults(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	for _, mode := range []struct {
		name        string
		parallelism int
	}{{"seq", 0}, {"par", 1}, {"par32", 32}} {
		for _, perProc := range []int{1, 2, 4, 16} {
			for _, mailbox := range []int{1, 16, 64, 256} {
				name := fmt.Sprintf("mode=%s/partitions=%dxprocs/mailbox=%d", mode.name, perProc, mailbox)
				b.Run(name, func(b *testing.B) {
					im := impl{"chanlimit", func(tb testing.TB, p policy) limiter {
						return newChanlimitWith(tb, chanlimit.Config{Limit: p.limit, Window: p.window,
							Partitions: perProc * procs, MailboxSize: mailbox})
					}}
					benchAllow(b, im, admitAll, keys(1000), mode.parallelism)
				})
			}
		}
	}
}
