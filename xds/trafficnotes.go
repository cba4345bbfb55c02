package xds

import "github.com/meshfed/meshfed/xds/translate"

// TrafficNotes lists the traffic config in force that proxyless gRPC
// clients are not sent, by host (see Translator.TrafficNotes).
func (s *Server) TrafficNotes() []translate.TrafficNote {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tr.TrafficNotes()
}
