package eureka

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// appsBody is an /apps or /apps/delta answer (JSON, indented as Polaris
// writes it) of the instances given as "APP/id/ip/status[/action]".
func appsBody(hashcode string, insts ...string) []byte {
	var apps []string
	for _, s := range insts {
		f := strings.Split(s, "/")
		action := ""
		if len(f) > 4 {
			action = fmt.Sprintf(`, "actionType": %q`, f[4])
		}
		apps = append(apps, fmt.Sprintf(`{"name": %q, "instance": [{"instanceId": %q, "app": %q, "ipAddr": %q, "hostName": %q,
			"status": %q, "port": {"$": 8080, "@enabled": "true"},
			"dataCenterInfo": {"@class": "com.netflix.appinfo.AmazonInfo", "name": "Amazon",
				"metadata": {"instance-id": "i-%s", "availability-zone": "us-east-1a"}},
			"metadata": {
				"version": "v1",
				"zone": ""
			}%s}]}`, f[0], f[1], f[0], f[2], f[2], f[3], f[1], action))
	}
	return fmt.Appendf(nil, `{"applications": {"apps__hashcode": %q, "application": [%s]}}`, hashcode, strings.Join(apps, ","))
}

func ids(insts appInstances) []string {
	var out []string
	for _, in := range insts {
		out = append(out, in.id()+"="+in.IPAddr)
	}
	return out
}

// within reports whether s's bytes lie in [lo, hi).
func within(s string, lo, hi uintptr) bool {
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	return len(s) > 0 && p >= lo && p+uintptr(len(s)) <= hi
}

// TestFullFetchSettledTogether: a full fetch's instances are one array,
// their strings one pack apart from the decoded answer, equal metadata
// and host names equal to the address held once; an app named twice is
// merged, the last of an id counts; what is published holds none of the
// state's strings.
func TestFullFetchSettledTogether(t *testing.T) {
	t.Parallel()
	body := appsBody("UP_4_", "B/b-1/10.0.0.9/UP", "A/a-3/10.0.0.3/UP", "A/a-1/10.0.0.1/UP", "B/b-1/10.0.0.8/UP", "A/a-2/10.0.0.2/UP")
	p, err := decodePayload(body)
	if err != nil {
		t.Fatal(err)
	}
	w := fixtureWatch(t, Config{})
	w.applyFull(p)
	if got := ids(w.apps["A"]); !slices.Equal(got, []string{"a-1=10.0.0.1", "a-2=10.0.0.2", "a-3=10.0.0.3"}) {
		t.Errorf("app A holds %v", got)
	}
	if got := ids(w.apps["B"]); !slices.Equal(got, []string{"b-1=10.0.0.8"}) {
		t.Errorf("app B holds %v, want the last b-1 listed", got)
	}
	var all []*instance
	for _, k := range []string{"A", "B"} {
		all = append(all, w.apps[k]...)
	}
	// One array: the records are adjacent.
	first := uintptr(unsafe.Pointer(all[0]))
	lo, hi := first, first
	for _, in := range all {
		lo, hi = min(lo, uintptr(unsafe.Pointer(in))), max(hi, uintptr(unsafe.Pointer(in)))
	}
	if size := unsafe.Sizeof(instance{}); hi-lo != uintptr(len(all)-1)*size {
		t.Errorf("%d records span %d bytes, want one array of %d", len(all), hi-lo, uintptr(len(all)-1)*size)
	}
	// One pack: every string inside the span of the packed bytes, none in
	// the answer.
	var strs []string
	packed := 0
	for _, in := range all {
		if in.HostName != in.IPAddr || unsafe.StringData(in.HostName) != unsafe.StringData(in.IPAddr) {
			t.Errorf("%s: host name equal to the address held twice", in.id())
		}
		if unsafe.StringData(in.Metadata) != unsafe.StringData(all[0].Metadata) {
			t.Errorf("%s: equal metadata held twice", in.id())
		}
		if in.Metadata != `{"version":"v1","zone":""}` {
			t.Errorf("%s: metadata %q, want it compacted", in.id(), in.Metadata)
		}
		r := in.rareOf()
		strs = append(strs, in.InstanceId, in.IPAddr, r.awsID, r.zone)
		packed += len(in.InstanceId) + len(in.IPAddr) + len(r.awsID) + len(r.zone)
	}
	packed += len(all[0].Metadata)
	plo := uintptr(unsafe.Pointer(unsafe.StringData(all[0].InstanceId)))
	for _, s := range append(strs, all[0].Metadata) {
		plo = min(plo, uintptr(unsafe.Pointer(unsafe.StringData(s))))
	}
	blo := uintptr(unsafe.Pointer(&body[0]))
	for _, s := range append(strs, all[0].Metadata) {
		if !within(s, plo, plo+uintptr(packed)) {
			t.Errorf("%q is not in the pack", s)
		}
		if within(s, blo, blo+uintptr(len(body))) {
			t.Errorf("%q points into the answer", s)
		}
	}
	services, _ := w.state()
	for _, s := range services {
		for _, e := range s.Endpoints {
			for _, v := range []string{e.Origin, e.Address, e.Locality.Region, e.Locality.Zone} {
				if within(v, plo, plo+uintptr(packed)) {
					t.Errorf("%s: published %q points into the state's pack", s.Hostname, v)
				}
			}
			if e.Weight != 1 || e.Locality.Zone != "us-east-1a" {
				t.Errorf("%s: endpoint %+v", s.Hostname, e)
			}
		}
	}
}

// TestDeltaOnSettledApps: a delta adds, changes and deletes instances of
// apps settled by a full fetch without touching the neighbouring apps
// (whose lists are windows of the same array).
func TestDeltaOnSettledApps(t *testing.T) {
	t.Parallel()
	full, err := decodePayload(appsBody("UP_4_", "A/a-1/10.0.0.1/UP", "A/a-3/10.0.0.3/UP", "B/b-1/10.0.1.1/UP", "C/c-1/10.0.2.1/UP"))
	if err != nil {
		t.Fatal(err)
	}
	w := fixtureWatch(t, Config{})
	w.applyFull(full)
	delta, err := decodePayload(appsBody("DOWN_1_UP_3_", "A/a-2/10.0.0.2/UP/ADDED", "A/a-3/10.0.0.3/DOWN/MODIFIED", "B/b-1/10.0.1.1/UP/DELETED", "C/c-2/10.0.2.2/UP/ADDED"))
	if err != nil {
		t.Fatal(err)
	}
	touched := w.applyDelta(delta)
	if got := w.hashcode(); got != "DOWN_1_UP_4_" {
		t.Errorf("hashcode after the delta %q, want DOWN_1_UP_4_", got)
	}
	if len(touched) != 3 {
		t.Errorf("touched %v, want A, B and C", touched)
	}
	if got := ids(w.apps["A"]); !slices.Equal(got, []string{"a-1=10.0.0.1", "a-2=10.0.0.2", "a-3=10.0.0.3"}) || w.apps["A"][2].Status != "DOWN" {
		t.Errorf("app A holds %v (a-3 %s)", got, w.apps["A"][2].Status)
	}
	if _, ok := w.apps["B"]; ok {
		t.Errorf("app B holds %v after its only instance was deleted", ids(w.apps["B"]))
	}
	if got := ids(w.apps["C"]); !slices.Equal(got, []string{"c-1=10.0.2.1", "c-2=10.0.2.2"}) {
		t.Errorf("app C holds %v", got)
	}
	for key := range touched {
		w.reconvert(key)
	}
	services, _ := w.state()
	if len(services) != 2 || len(services[0].Endpoints) != 3 || len(services[1].Endpoints) != 2 {
		t.Errorf("published %v", services)
	}
}
