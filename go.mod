module github.com/chanlimit/chanlimit

go 1.26

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/dunglas/httpsfv v1.1.2
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
