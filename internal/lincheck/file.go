package lincheck

import (
	"encoding/json"
	"errors"
	"os"

	"github.com/anishathalye/porcupine"
)

// A history in a file, to check again later (longer, or under another
// model): JSON, an operation a line.
type fileOp struct {
	Client       int
	Input        Input
	Output       Output
	Err          string
	Call, Return int64
}

// Save writes history to path.
func Save(path string, history []porcupine.Operation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, op := range history {
		out := op.Output.(Output)
		e := fileOp{Client: op.ClientId, Input: op.Input.(Input), Output: out, Call: op.Call, Return: op.Return}
		if out.Err != nil {
			e.Err = out.Err.Error()
		}
		e.Output.Err = nil
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// Load reads a history Save wrote.
func Load(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	var ops []porcupine.Operation
	for dec.More() {
		var e fileOp
		if err := dec.Decode(&e); err != nil {
			return nil, err
		}
		if e.Err != "" {
			e.Output.Err = errors.New(e.Err)
		}
		ops = append(ops, porcupine.Operation{ClientId: e.Client, Input: e.Input, Call: e.Call, Output: e.Output, Return: e.Return})
	}
	return ops, nil
}
