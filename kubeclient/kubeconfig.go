package kubeclient

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CheckRemoteKubeconfig accepts kubeconfigs with inline credentials only:
// a Secret must not make meshfed run programs (exec, auth providers) or
// read its own files (paths to tokens, keys, certificates).
func CheckRemoteKubeconfig(b []byte) error {
	kc, err := clientcmd.Load(b)
	if err != nil {
		return fmt.Errorf("not a kubeconfig: %w", err)
	}
	// Checked before clientcmd.Validate, which reads the files it names.
	for _, c := range kc.Clusters {
		if c.CertificateAuthority != "" {
			return errors.New("kubeconfig refers to a CA file; only inline certificate-authority-data is accepted")
		}
	}
	for _, a := range kc.AuthInfos {
		if bad := unsafeAuth(a); bad != "" {
			return fmt.Errorf("kubeconfig uses %s; only inline credentials are accepted from Secrets", bad)
		}
	}
	if _, ok := kc.Contexts[kc.CurrentContext]; !ok {
		return errors.New("kubeconfig has no current context")
	}
	if err := clientcmd.Validate(*kc); err != nil {
		return fmt.Errorf("invalid kubeconfig: %w", err)
	}
	return nil
}

func unsafeAuth(a *clientcmdapi.AuthInfo) string {
	switch {
	case a.Exec != nil:
		return "an exec plugin"
	case a.AuthProvider != nil:
		return "an auth provider"
	case a.TokenFile != "":
		return "a token file"
	case a.ClientCertificate != "" || a.ClientKey != "":
		return "certificate files"
	}
	return ""
}

// RemoteConfig returns the REST config of a kubeconfig from a Secret
// (its current context) once CheckRemoteKubeconfig accepted it. Give it
// connections of its own with OwnConnections.
func RemoteConfig(kc []byte) (*rest.Config, error) {
	if err := CheckRemoteKubeconfig(kc); err != nil {
		return nil, err
	}
	return clientcmd.RESTConfigFromKubeConfig(kc)
}
