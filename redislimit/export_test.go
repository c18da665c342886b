package redislimit

// UseScripts makes s call decide.lua as a script (EVALSHA), as it does
// once Redis has refused to load its library: for the tests of that path.
func UseScripts(s *Store) { s.scripts.Store(true) }

// BinEntry returns the bytes of an entry of the script's layout
// (binEntry).
func BinEntry(field string, nums ...float64) string { return binEntry(field, nums...) }
