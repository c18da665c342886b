module github.com/chanlimit/chanlimit/examples/redis

go 1.26.0

replace (
	github.com/chanlimit/chanlimit => ../../
	github.com/chanlimit/chanlimit/redislimit => ../../redislimit
)

require (
	github.com/chanlimit/chanlimit v0.3.0
	github.com/chanlimit/chanlimit/redislimit v0.3.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
