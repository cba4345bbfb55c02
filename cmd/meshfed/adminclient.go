package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshfed/meshfed/config"
)

// adminFlags are the flags every command that reads a running meshfed's
// admin API takes. Without --admin the address, the token file and the
// TLS setting come from --config (clusters.yaml).
type adminFlags struct {
	config    string
	admins    []string
	tokenFile string
	caFile    string
	certFile  string
	keyFile   string
}

func (f *adminFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.config, "config", "clusters.yaml", "cluster registry file (for the admin address, token file and TLS)")
	c.Flags().StringArrayVar(&f.admins, "admin", nil, "admin address, host:port or an http(s):// URL (overrides --config; repeatable where a command compares instances)")
	c.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the admin bearer token (default: admin.tokenFile of --config)")
	c.Flags().StringVar(&f.caFile, "cacert", "", "CA bundle to verify an https admin address")
	c.Flags().StringVar(&f.certFile, "cert", "", "client certificate for an admin port that requires mTLS")
	c.Flags().StringVar(&f.keyFile, "key", "", "key of --cert")
}

// adminClient talks to one meshfed admin port.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

// clients resolves the flags into one client per admin address.
func (f *adminFlags) clients(cmd *cobra.Command) ([]*adminClient, error) {
	admins := f.admins
	tokenFile, ca, cert, key := f.tokenFile, f.caFile, f.certFile, f.keyFile
	if len(admins) == 0 || cmd.Flags().Changed("config") {
		cfg, err := config.Load(f.config)
		if err != nil {
			if len(admins) == 0 {
				return nil, fmt.Errorf("%w (or give --admin)", err)
			}
			return nil, err
		}
		if len(admins) == 0 {
			a := cfg.Admin.Address
			if cfg.Admin.TLS != nil {
				a = "https://" + a
				// The CLI runs beside meshfed: its own certificate is a
				// client certificate the clientCA signed only if the
				// operator says so; reuse the server's CA when given.
				if ca == "" {
					ca = cfg.Admin.TLS.ClientCA
				}
			}
			admins = []string{a}
		}
		if tokenFile == "" {
			tokenFile = cfg.Admin.TokenFile
		}
	}
	var token string
	if tokenFile != "" {
		t, err := config.ReadToken(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		token = t
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificates", ca)
		}
		tc.RootCAs = pool
	}
	if cert != "" || key != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}
	out := make([]*adminClient, 0, len(admins))
	for _, a := range admins {
		base := strings.TrimSuffix(a, "/")
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		if _, err := url.Parse(base); err != nil {
			return nil, fmt.Errorf("--admin %q: %w", a, err)
		}
		out = append(out, &adminClient{base: base, token: token, http: hc})
	}
	return out, nil
}

// one returns the single client of a command that reads one instance.
func (f *adminFlags) one(cmd *cobra.Command) (*adminClient, error) {
	cs, err := f.clients(cmd)
	if err != nil {
		return nil, err
	}
	if len(cs) != 1 {
		return nil, errors.New("this command reads one meshfed: give --admin once")
	}
	return cs[0], nil
}

// apiError is the message of an admin API error answer ({"error": ...}).
type apiError string

func (e apiError) Error() string { return string(e) }

// errNotFound is a 404 from the admin API.
var errNotFound = errors.New("not found")

// get fetches path and decodes its JSON into v. A non-2xx answer is an
// error carrying the API's own message (errNotFound for 404).
func (c *adminClient) get(path string, v any) error {
	return c.do(http.MethodGet, path, v)
}

// post POSTs to path (no body) and decodes the JSON answer into v.
func (c *adminClient) post(path string, v any) error {
	return c.do(http.MethodPost, path, v)
}

func (c *adminClient) do(method, path string, v any) error {
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("is meshfed running? %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if len(msg) > 300 {
			msg = msg[:300] + "..." // not the API's JSON: a proxy's page, say
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error // the API's own message, whole (a did-you-mean may list many names)
		}
		switch resp.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", errNotFound, apiError(msg))
		case http.StatusUnauthorized:
			return fmt.Errorf("%s %s: %s: %s (give --token-file, or --config with admin.tokenFile)", method, path, resp.Status, msg)
		}
		return fmt.Errorf("%s %s: %s: %w", method, path, resp.Status, apiError(msg))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}
