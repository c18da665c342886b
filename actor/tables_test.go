package actor_test

import (
	"time"

	"github.com/chanlimit/chanlimit/actor"
	"github.com/chanlimit/chanlimit/algorithms"
	"github.com/chanlimit/chanlimit/internal/keytable"
)

func init() {
	actor.NewFixedWindows = func() actor.Table {
		w, err := algorithms.NewFixedWindow(algorithms.Params{Limit: 2, Window: time.Second})
		if err != nil {
			panic(err)
		}
		return keytable.NewRule(w).NewTable()
	}
}
