package kubeclienttest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// LoadDirect writes the catalog as Load does, but straight into the etcd
// that the cluster's API server stores it in (etcdURL, and prefix: the
// server's --etcd-prefix), for sizes at which writing through the API
// server takes too long on a small machine (about 100 writes/s on two
// shared cores; 220,000 objects for 10,000 services). The API server
// sees the objects through its watch on etcd, as it sees its own writes.
//
// The objects are what the API server would have stored: the first
// namespace, node and service (with its pods and slice) are written
// through cs, and every other object takes over what the server set on
// those (managed fields, creation time, the service's IP families and
// policies) and gets its own UID and cluster IP; defaults are applied by
// the server when it reads. Objects are encoded as the server stores
// them (protobuf) and put 100 to an etcd transaction over etcd's JSON
// gateway.
func (c Catalog) LoadDirect(ctx context.Context, cs kubernetes.Interface, etcdURL, prefix string) error {
	c.defaults()
	if err := ignoreExists(cs.CoreV1().Namespaces().Create(ctx, namespace(0), metav1.CreateOptions{})); err != nil {
		return err
	}
	if err := ignoreExists(cs.CoreV1().Nodes().Create(ctx, node(0), metav1.CreateOptions{})); err != nil {
		return err
	}
	if err := c.loadService(ctx, cs, 0); err != nil {
		return err
	}
	e := etcdKV{url: etcdURL, prefix: prefix}
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	var tNS corev1.Namespace
	var tNode corev1.Node
	var tSvc corev1.Service
	var tPod corev1.Pod
	var tSlice discoveryv1.EndpointSlice
	pod0, _ := c.pod(c.Namespace(0), c.Name(0), 0, 0)
	for key, into := range map[string]runtime.Object{
		"/namespaces/ns-0": &tNS,
		"/minions/node-0":  &tNode,
		"/services/specs/" + c.Namespace(0) + "/" + c.Name(0):      &tSvc,
		"/pods/" + c.Namespace(0) + "/" + pod0.Name:                &tPod,
		"/endpointslices/" + c.Namespace(0) + "/" + c.SliceName(0): &tSlice,
	} {
		raw, err := e.get(ctx, key)
		if err != nil {
			return err
		}
		if _, _, err := codec.Decode(raw, nil, into); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	adopt := func(m *metav1.ObjectMeta, t *metav1.ObjectMeta, uid string) {
		m.UID, m.CreationTimestamp, m.ManagedFields, m.Generation = types.UID(uid), t.CreationTimestamp, t.ManagedFields, t.Generation
	}
	type kv struct {
		key string
		obj runtime.Object
	}
	var jobs []func() error
	batch := func(objs []kv) {
		jobs = append(jobs, func() error {
			var ops []etcdPut
			for _, o := range objs {
				gvks, _, err := scheme.Scheme.ObjectKinds(o.obj)
				if err != nil {
					return err
				}
				o.obj.GetObjectKind().SetGroupVersionKind(gvks[0]) // the serializer writes the object's own
				var b bytes.Buffer
				if err := codec.Encode(o.obj, &b); err != nil {
					return err
				}
				ops = append(ops, etcdPut{o.key, b.Bytes()})
			}
			return e.put(ctx, ops)
		})
	}
	var pending []kv
	add := func(key string, obj runtime.Object) {
		pending = append(pending, kv{key, obj})
		if len(pending) == 100 {
			batch(pending)
			pending = nil
		}
	}
	namespaces := (c.Services + c.PerNamespace - 1) / c.PerNamespace
	for n := 1; n < namespaces; n++ {
		ns := namespace(n)
		adopt(&ns.ObjectMeta, &tNS.ObjectMeta, uid(1, n))
		ns.Spec, ns.Status = tNS.Spec, tNS.Status
		add("/namespaces/"+ns.Name, ns)
	}
	for n := 1; n < c.Nodes; n++ {
		nd := node(n)
		adopt(&nd.ObjectMeta, &tNode.ObjectMeta, uid(2, n))
		add("/minions/"+nd.Name, nd)
	}
	for i := 1; i < c.Services; i++ {
		ns, name := c.Namespace(i), c.Name(i)
		svc := service(ns, name)
		adopt(&svc.ObjectMeta, &tSvc.ObjectMeta, uid(3, i))
		ip := fmt.Sprintf("10.96.%d.%d", (i+16)>>8&255, (i+16)&255)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy, svc.Spec.InternalTrafficPolicy = tSvc.Spec.IPFamilies, tSvc.Spec.IPFamilyPolicy, tSvc.Spec.InternalTrafficPolicy
		add("/services/specs/"+ns+"/"+name, svc)
		slice := c.slice(ns, name)
		adopt(&slice.ObjectMeta, &tSlice.ObjectMeta, uid(4, i))
		slice.OwnerReferences[0].UID = svc.UID
		for j := range c.EndpointsPer {
			pod, nodeName := c.pod(ns, name, i, j)
			adopt(&pod.ObjectMeta, &tPod.ObjectMeta, uid(5, i*c.EndpointsPer+j))
			pod.Status = tPod.Status
			if c.PodStatus {
				pod.Status = podStatus(pod, Address(i, j, c.EndpointsPer), nodeAddress(c.node(i, j)))
			}
			add("/pods/"+ns+"/"+pod.Name, pod)
			slice.Endpoints = append(slice.Endpoints, c.endpoint(i, j, pod, nodeName))
		}
		add("/endpointslices/"+ns+"/"+slice.Name, slice)
	}
	if len(pending) > 0 {
		batch(pending)
	}
	if err := parallel(ctx, c.Workers, jobs); err != nil {
		return err
	}
	return c.awaitServed(ctx, cs)
}

// awaitServed returns once the API server lists every service, slice, pod
// and node of the catalog from its watch cache (which informers list
// from, resourceVersion 0, and which follows etcd with a delay after a
// bulk write). Every put succeeded already, so etcd is not asked to count
// (with 100,000 pods on a loaded machine, that list timed out).
func (c Catalog) awaitServed(ctx context.Context, cs kubernetes.Interface) error {
	for _, r := range []struct {
		what string
		want int
	}{{"services", c.Services}, {"endpointslices", c.Services}, {"pods", c.Endpoints()}, {"nodes", c.Nodes}} {
		deadline := time.Now().Add(10 * time.Minute)
		for {
			// Errors are asked again until the deadline: on a loaded
			// machine the server gives up on (or drops) such a list.
			n, err := cached(ctx, cs, r.what)
			if err == nil && n >= r.want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the API server lists %d %s of %d written to etcd (%v)", n, r.what, r.want, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func uid(kind, n int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", kind, n) }

// cached counts the objects of resource (core or discovery.k8s.io) in
// the API server's watch cache: a list at resourceVersion 0, metadata
// only.
func cached(ctx context.Context, cs kubernetes.Interface, resource string) (int, error) {
	rc := cs.CoreV1().RESTClient()
	path := "/api/v1/" + resource
	if resource == "endpointslices" {
		rc, path = cs.DiscoveryV1().RESTClient(), "/apis/discovery.k8s.io/v1/endpointslices"
	}
	raw, err := rc.Get().AbsPath(path).Param("resourceVersion", "0").
		SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").Do(ctx).Raw()
	if err != nil {
		return 0, err
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// etcdKV reads and writes keys under a prefix through etcd's JSON gateway
// (/v3/kv/...), so that no etcd client module is needed.
type etcdKV struct{ url, prefix string }

type etcdPut struct {
	key   string
	value []byte
}

func (e etcdKV) call(ctx context.Context, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r, err := http.DefaultClient.Do(hr)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		err := fmt.Errorf("etcd %s: %s: %s", path, r.Status, b.String())
		if r.StatusCode == http.StatusServiceUnavailable {
			err = fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return err
	}
	return json.NewDecoder(r.Body).Decode(resp)
}

func (e etcdKV) get(ctx context.Context, key string) ([]byte, error) {
	var resp struct {
		KVs []struct {
			Value []byte `json:"value"` // base64 in JSON
		} `json:"kvs"`
	}
	if err := e.call(ctx, "/v3/kv/range", map[string]any{"key": []byte(e.prefix + key)}, &resp); err != nil {
		return nil, err
	}
	if len(resp.KVs) == 0 {
		return nil, fmt.Errorf("etcd: %s%s not found", e.prefix, key)
	}
	return resp.KVs[0].Value, nil
}

// errUnavailable marks etcd's 503 answers.
var errUnavailable = errors.New("etcd unavailable")

// put writes ops in one transaction.
func (e etcdKV) put(ctx context.Context, ops []etcdPut) error {
	type put struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	type op struct {
		RequestPut put `json:"requestPut"`
	}
	var success []op
	for _, o := range ops {
		success = append(success, op{put{base64.StdEncoding.EncodeToString([]byte(e.prefix + o.key)), base64.StdEncoding.EncodeToString(o.value)}})
	}
	var resp struct {
		Succeeded bool `json:"succeeded"`
	}
	// Puts are idempotent: an etcd too loaded to commit in time (503,
	// "request timed out") is asked again, a few times.
	err := e.call(ctx, "/v3/kv/txn", map[string]any{"success": success}, &resp)
	for try := 1; errors.Is(err, errUnavailable) && try < 5; try++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * time.Second):
		}
		err = e.call(ctx, "/v3/kv/txn", map[string]any{"success": success}, &resp)
	}
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd: transaction of %d puts did not succeed", len(ops))
	}
	return nil
}
