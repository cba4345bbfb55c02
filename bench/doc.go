// Package bench is meshfed's benchmark harness (issue 3): the fixture every
// scenario uses (services, churn events, which clusters each load-generator
// stream watches), the bench server that runs meshfed's real aggregate and
// xds packages or the go-control-plane SnapshotCache baseline, the load
// generator's ADS streams, the measurement helpers (/proc, percentiles) and
// the S6 registry-ingest harness.
//
// Processes (see BENCHMARKS.md for the method):
//
//	benchreport ──builds and starts──► benchserver -impl meshfed|baseline
//	     │                              (churn driver inside: stamps each
//	     │                               write, then Sink.Publish)
//	     └──starts──► loadgen (GOMAXPROCS=1, N ADS streams, ACK at once,
//	                           records when each write's marker is ACKed)
//
// The write → ACK figure joins the server's event log (seq, service,
// stamp) with the load generator's records (stream, cluster, highest seq
// marker in the ClusterLoadAssignment, ACK time). Every changed endpoint
// carries its event's sequence number in the label SeqLabel, so a CLA that
// holds seq q proves every earlier write to that service arrived too.
package bench
