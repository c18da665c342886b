package redislimit

// UseScripts makes s call decide.lua as a script (EVALSHA), as it does
// once Redis has refused to load its library: for the tests of that path.
func UseScripts(s *Store) { s.scripts.Store(true) }
