package chanlimit

import (
	"context"
	"log/slog"
)

// LogDecisions returns an Observe (Config.Observe) that logs each Event
// with l (if l is nil, with slog.Default() as it is at each Event): a denial, or a decision a dry-run
// policy would have denied, at Info; an error at Warn; a grant, and a
// refund, at Debug. The message is "chanlimit " and the Event's kind
// ("chanlimit allow", "chanlimit wait", "chanlimit refund"); the
// attributes are those of key, n, allowed, would_deny, policy,
// retry_after, waited and err that apply: allowed with a decision, and
// policy with it when the decision names one; would_deny only when true;
// retry_after with a denial; waited with a wait; err with an error. It
// asks l whether the level is enabled first, so a level turned off costs
// no attribute.
//
// Keys are logged as given: where keys are secrets (API keys), wrap l's
// handler with one that redacts the "key" attribute.
func LogDecisions(l *slog.Logger) func(ctx context.Context, e Event) {
	return func(ctx context.Context, e Event) {
		l := l
		if l == nil {
			l = slog.Default()
		}
		d := &e.Decision
		decided := e.Kind != EventRefund && decided(d) // a wait refused at once has its denial too
		level := slog.LevelDebug
		switch {
		case e.Err != nil:
			level = slog.LevelWarn
		case decided && (!d.Allowed || d.WouldDeny):
			level = slog.LevelInfo
		}
		if !l.Enabled(ctx, level) {
			return
		}
		var buf [8]slog.Attr
		attrs := append(buf[:0], slog.String("key", e.Key), slog.Int("n", e.N))
		if decided {
			attrs = append(attrs, slog.Bool("allowed", d.Allowed))
			if d.WouldDeny {
				attrs = append(attrs, slog.Bool("would_deny", true))
			}
			if d.Policy != "" {
				attrs = append(attrs, slog.String("policy", d.Policy))
			}
			if !d.Allowed {
				attrs = append(attrs, slog.Duration("retry_after", d.RetryAfter))
			}
		}
		if e.Kind == EventWait {
			attrs = append(attrs, slog.Duration("waited", e.Waited))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.Any("err", e.Err))
		}
		l.LogAttrs(ctx, level, logMessage(e.Kind), attrs...)
	}
}

// logMessage returns LogDecisions' message for an Event of kind k.
func logMessage(k EventKind) string {
	switch k {
	case EventAllow:
		return "chanlimit allow"
	case EventWait:
		return "chanlimit wait"
	case EventRefund:
		return "chanlimit refund"
	}
	return "chanlimit " + k.String()
}
