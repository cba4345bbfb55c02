package xds

// TrafficNotes lists the traffic config in force that proxyless gRPC
// clients are not sent, by host (see Translator.TrafficNotes).
func (s *Server) TrafficNotes() []TrafficNote {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tr.TrafficNotes()
}
