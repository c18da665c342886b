package redislimit

// UseScripts makes s call decide.lua as a script (EVALSHA), as it does
// once Redis has refused to load its library: for the tests of that path.
func UseScripts(s *Store) { s.scripts.Store(true) }

// FastFaults returns the calls in which the script's fast path raised an
// error, since the tests began (fastFaults).
func FastFaults() uint64 { return fastFaults.Load() }

// BinEntry returns the bytes of an entry of the script's layout
// (binEntry).
func BinEntry(field string, nums ...float64) string { return binEntry(field, nums...) }
