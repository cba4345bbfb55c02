package nacos

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/registries"
)

// maxAnswer bounds the size of one answer read from Nacos.
const maxAnswer = 64 << 20

// client holds what every transport needs: the servers, an HTTP client,
// the TLS config and the credentials. Not safe for concurrent use.
type client struct {
	cfg     *Config
	http    *http.Client
	tr      *http.Transport
	tls     *tls.Config // nil: plaintext
	scheme  string
	current int // index of the server that answered last

	username, password   string
	accessKey, secretKey string

	token        string // accessToken from login; "" without username
	tokenExpires time.Time
}

// newClient reads the credential and TLS files. Its errors name the file,
// never its contents.
func (r *Registry) newClient() (*client, error) {
	c := &client{cfg: &r.cfg, scheme: "http"}
	var err error
	read := func(path, what string) string {
		if path == "" || err != nil {
			return ""
		}
		var v string
		v, err = readSecret(path, what)
		return v
	}
	c.username = read(r.cfg.UsernameFile, "usernameFile")
	c.password = read(r.cfg.PasswordFile, "passwordFile")
	c.accessKey = read(r.cfg.AccessKeyFile, "accessKeyFile")
	c.secretKey = read(r.cfg.SecretKeyFile, "secretKeyFile")
	if err != nil {
		return nil, err
	}
	if r.cfg.TLS.Enabled {
		t := r.cfg.TLS
		c.tls = &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // opt-in
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("nacos tls.caFile: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("nacos tls.caFile %s: no PEM certificate in it", t.CAFile)
			}
			c.tls.RootCAs = pool
		}
		if t.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("nacos tls.certFile/keyFile: %w", err)
			}
			c.tls.Certificates = []tls.Certificate{cert}
		}
		c.scheme = "https"
	}
	c.tr = http.DefaultTransport.(*http.Transport).Clone()
	c.tr.MaxIdleConnsPerHost = 4
	c.tr.TLSClientConfig = c.tls
	c.http = &http.Client{Transport: c.tr, Timeout: r.cfg.Timeout.Std()}
	return c, nil
}

func (c *client) close() { c.tr.CloseIdleConnections() }

// readSecret reads the first line of a credentials file, trimmed.
func readSecret(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("nacos %s %s: %v", what, path, pe.Err)
		}
		return "", fmt.Errorf("nacos %s %s: cannot read", what, path)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "", fmt.Errorf("nacos %s %s is empty", what, path)
	}
	return line, nil
}

// baseURL is the HTTP API root of server i: scheme://host:port/nacos.
func (c *client) baseURL(i int) string {
	return c.scheme + "://" + c.cfg.Servers[i] + c.cfg.ContextPath
}

// grpcTarget is server i's gRPC address.
func (c *client) grpcTarget(i int) string {
	host, port, _ := net.SplitHostPort(c.cfg.Servers[i])
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(n+c.cfg.GRPCPortOffset))
}

// forgetToken drops the cached access token, so the next call logs in.
func (c *client) forgetToken() { c.token, c.tokenExpires = "", time.Time{} }

// login fetches an access token from server i when a username is
// configured and the token is missing or about to expire.
func (c *client) login(ctx context.Context, i int) error {
	if c.username == "" || (c.token != "" && time.Now().Before(c.tokenExpires)) {
		return nil
	}
	form := url.Values{"username": {c.username}, "password": {c.password}}
	u := c.baseURL(i) + "/v1/auth/users/login"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("nacos login at %s: %s", c.cfg.Servers[i], registries.NetReason(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return &authError{msg: fmt.Sprintf("nacos login at %s: HTTP %d", c.cfg.Servers[i], resp.StatusCode)}
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("nacos login at %s: HTTP %d", c.cfg.Servers[i], resp.StatusCode)
	}
	var ans struct {
		AccessToken string `json:"accessToken"`
		TokenTTL    int64  `json:"tokenTtl"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || ans.AccessToken == "" {
		return fmt.Errorf("nacos login at %s: answer has no accessToken", c.cfg.Servers[i])
	}
	ttl := time.Duration(ans.TokenTTL) * time.Second
	if ttl <= 0 {
		ttl = 5 * time.Hour // Nacos' default token TTL is 18000s
	}
	c.token, c.tokenExpires = ans.AccessToken, time.Now().Add(ttl*9/10)
	return nil
}

// authHeaders returns the credentials for one naming request about
// resource (group@@service, or "" for requests on no service), as Nacos
// clients send them: accessToken, and with an access key ak, data
// (timestamp[@@resource]) and signature (base64 HMAC-SHA1 of data).
func (c *client) authHeaders(resource string) map[string]string {
	h := map[string]string{}
	if c.token != "" {
		h["accessToken"] = c.token
	}
	if c.accessKey != "" {
		data := strconv.FormatInt(time.Now().UnixMilli(), 10)
		if resource != "" {
			data += "@@" + resource
		}
		h["ak"] = c.accessKey
		h["data"] = data
		h["signature"] = sign(data, c.secretKey)
	}
	return h
}

// sign is Nacos' request signature: base64(HMAC-SHA1(secretKey, data)).
func sign(data, secretKey string) string {
	m := hmac.New(sha1.New, []byte(secretKey))
	m.Write([]byte(data))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
