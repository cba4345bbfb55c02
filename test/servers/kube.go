package servers

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/utils/ptr"
)

// Versions that tools/testservers builds.
const (
	KubeVersion = "1.37.1"
	EtcdVersion = "3.6.9"
)

// KubeStartTimeout bounds how long a server start waits until it serves.
var KubeStartTimeout = 90 * time.Second

// Tokens of the static token file every API server gets. AdminToken is in
// system:masters; ReaderToken is user "meshfed" with no rights until a
// test binds a role to it (the API servers authorize with RBAC).
const (
	AdminToken  = "meshfed-test-admin-token"
	ReaderToken = "meshfed-test-reader-token"
	ReaderUser  = "meshfed"
)

// KubeBinaries returns the paths of kube-apiserver and etcd as
// `tools/testservers/build.sh kube-apiserver etcd` build them, and whether
// both exist.
func KubeBinaries() (apiserver, etcd string, ok bool) {
	apiserver = filepath.Join(CacheDir(), "bin", "kube-apiserver-"+KubeVersion, "kube-apiserver")
	etcd = filepath.Join(CacheDir(), "bin", "etcd-"+EtcdVersion, "etcd")
	return apiserver, etcd, isFile(apiserver) && isFile(etcd)
}

// Etcd is an etcd server on loopback owned by one test.
type Etcd struct {
	// URL is the client URL, http://127.0.0.1:port.
	URL string
	p   *Process
}

// StartEtcd starts etcd 3.6 on free loopback ports with a temporary data
// directory, waits until it is healthy and stops it in t.Cleanup (after
// every API server started on it: cleanups run last-in first-out). It
// calls Missing if the binaries are not built.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	_, bin, ok := KubeBinaries()
	if !ok {
		Missing(t, "kube-apiserver "+KubeVersion+" and etcd "+EtcdVersion, "tools/testservers/build.sh kube-apiserver; tools/testservers/build.sh etcd")
	}
	dir := t.TempDir()
	pick := FreePorts(t, 2)
	client, peer := pick[0], pick[1]
	e := &Etcd{URL: "http://127.0.0.1:" + strconv.Itoa(client)}
	e.p = &Process{Name: "etcd", Bin: bin, LogPath: filepath.Join(dir, "etcd.log"), StopTimeout: 15 * time.Second, Args: []string{
		"--name", "test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", e.URL, "--advertise-client-urls", e.URL,
		"--listen-peer-urls", "http://127.0.0.1:" + strconv.Itoa(peer),
		"--initial-advertise-peer-urls", "http://127.0.0.1:" + strconv.Itoa(peer),
		"--initial-cluster", "test=http://127.0.0.1:" + strconv.Itoa(peer),
		"--unsafe-no-fsync", "--log-level", "warn",
	}}
	t.Cleanup(func() { e.p.Stop() })
	if err := e.p.StartReady(KubeStartTimeout, func() error { return httpOK(noKeepAlive, e.URL+"/health", "") }); err != nil {
		t.Fatal(err)
	}
	return e
}

// KubeAPIServer is a kube-apiserver on loopback owned by one test: one
// Kubernetes "cluster" whose objects live in etcd under its own prefix.
// There is no controller manager: tests create EndpointSlices themselves.
type KubeAPIServer struct {
	// URL is https://127.0.0.1:port.
	URL string
	// Prefix is the etcd prefix; two servers with one prefix serve one
	// cluster (as an HA control plane does).
	Prefix string
	// CA is the PEM of the server's self-signed certificate.
	CA []byte

	dir  string
	port int
	p    *Process
}

// StartKubeAPIServer starts a kube-apiserver on a free loopback port that
// stores its objects in e under prefix (e.g. "/cluster-a"), authenticates
// AdminToken and ReaderToken, authorizes with RBAC, waits until /readyz
// answers and stops it in t.Cleanup.
func StartKubeAPIServer(t testing.TB, e *Etcd, prefix string) *KubeAPIServer {
	t.Helper()
	bin, _, ok := KubeBinaries()
	if !ok {
		Missing(t, "kube-apiserver "+KubeVersion, "tools/testservers/build.sh kube-apiserver")
	}
	dir := t.TempDir()
	k := &KubeAPIServer{Prefix: prefix, dir: dir, port: FreePort(t)}
	k.URL = "https://127.0.0.1:" + strconv.Itoa(k.port)
	if err := writeServiceAccountKey(dir); err != nil {
		t.Fatal(err)
	}
	tokens := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n%s,%s,%s-uid\n", AdminToken, ReaderToken, ReaderUser, ReaderUser)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	k.p = &Process{Name: "kube-apiserver " + prefix, Bin: bin, LogPath: filepath.Join(dir, "apiserver.log"), StopTimeout: 15 * time.Second, Args: []string{
		"--etcd-servers", e.URL,
		"--etcd-prefix", prefix,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(k.port),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none",
		// No controller manager creates service accounts.
		"--disable-admission-plugins", "ServiceAccount",
		"--profiling=false",
		"--v", "0",
	}}
	t.Cleanup(func() { k.p.Stop() })
	k.Start(t)
	return k
}

// Start (re)starts the server on the same port and waits until it serves.
func (k *KubeAPIServer) Start(t testing.TB) {
	t.Helper()
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // only to find out when the test server is up
	}}
	err := k.p.StartReady(KubeStartTimeout, func() error { return httpOK(insecure, k.URL+"/readyz", AdminToken) })
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(k.dir, "certs", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	k.CA = ca
}

// Stop stops the server (SIGTERM, then SIGKILL after 15s).
func (k *KubeAPIServer) Stop(t testing.TB) {
	t.Helper()
	if !k.p.Stop() {
		t.Fatal("kube-apiserver: Stop while stopped")
	}
}

// Process is the server's process, for faults (Kill, Signal); Start
// restarts it after a Kill.
func (k *KubeAPIServer) Process() *Process { return k.p }

// Log returns the end of the server's output.
func (k *KubeAPIServer) Log() string { return tail(k.p.Log(), 8000) }

// Kubeconfig returns a kubeconfig for token with the CA inline and one
// context named context (also its current context).
func (k *KubeAPIServer) Kubeconfig(t testing.TB, context, token string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[context] = &clientcmdapi.Cluster{Server: k.URL, CertificateAuthorityData: k.CA}
	cfg.AuthInfos[context] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[context] = &clientcmdapi.Context{Cluster: context, AuthInfo: context}
	cfg.CurrentContext = context
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteKubeconfig writes Kubeconfig(context, token) to a file in a
// temporary directory and returns its path.
func (k *KubeAPIServer) WriteKubeconfig(t testing.TB, context, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), context+".kubeconfig")
	if err := os.WriteFile(p, k.Kubeconfig(t, context, token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Client returns a clientset authenticated with token whose connections
// are closed in t.Cleanup.
func (k *KubeAPIServer) Client(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	d := connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second}).DialContext)
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host:            k.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: k.CA},
		Dial:            d.DialContext,
		QPS:             100,
		Burst:           200,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.CloseAll)
	return cs
}

// writeServiceAccountKey writes sa.key (EC private key) and sa.pub.
func writeServiceAccountKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// KubeClusters are one etcd and N API servers, each its own cluster.
type KubeClusters struct {
	Etcd    *Etcd
	Servers []*KubeAPIServer
}

// StartKubeClusters starts one etcd and n API servers with the prefixes
// /cluster-0, /cluster-1, ... (started one after the other; each takes a
// few seconds).
func StartKubeClusters(t testing.TB, n int) *KubeClusters {
	t.Helper()
	kc := &KubeClusters{Etcd: StartEtcd(t)}
	for i := range n {
		kc.Servers = append(kc.Servers, StartKubeAPIServer(t, kc.Etcd, "/cluster-"+strconv.Itoa(i)))
	}
	return kc
}

// Apply creates every object of a multi-document YAML manifest (as
// kubectl create -f would) with the admin token. It knows the kinds
// meshfed's manifests use: Namespace, ServiceAccount, Secret, ClusterRole,
// ClusterRoleBinding, Role and RoleBinding; namespaces the objects name
// must exist or come first.
func (k *KubeAPIServer) Apply(t testing.TB, manifest []byte) {
	t.Helper()
	cs := k.Client(t, AdminToken)
	ctx := context.Background()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("manifest: %v", err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 || string(raw.Raw) == "null" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			t.Fatalf("manifest: %v", err)
		}
		opts := metav1.CreateOptions{}
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, opts)
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
		case *corev1.Secret:
			_, err = cs.CoreV1().Secrets(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, opts)
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
		default:
			t.Fatalf("manifest: Apply does not know %T", obj)
		}
		if err != nil {
			t.Fatalf("manifest: create %T: %v", obj, err)
		}
	}
}

// EnsureNamespace creates namespace ns unless it exists.
func (k *KubeAPIServer) EnsureNamespace(t testing.TB, ns string) {
	t.Helper()
	_, err := k.Client(t, AdminToken).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// ServiceAccountToken returns a token (valid for an hour) of the
// ServiceAccount ns/name, issued by the API server's TokenRequest API.
func (k *KubeAPIServer) ServiceAccountToken(t testing.TB, ns, name string) string {
	t.Helper()
	tr, err := k.Client(t, AdminToken).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}
