#!/usr/bin/env bash
# Generate the PKI of the local e2e cluster into DIR (default: $1):
# a CA, the apiserver's serving certificate (127.0.0.1 / kubernetes.default...),
# an admin client certificate in group system:masters, the front-proxy CA and
# client certificate (aggregation layer), and the service-account signing key pair. Certificates live 30 days; up.sh
# regenerates everything on every fresh start.
set -euo pipefail
D=${1:?usage: pki.sh DIR}
mkdir -p "$D"
cd "$D"
umask 077
openssl genrsa -out ca.key 2048 2>/dev/null
openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=specpilot-e2e-ca" -out ca.crt 2>/dev/null
leaf() { # name subject extensions
  openssl genrsa -out "$1.key" 2048 2>/dev/null
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
  printf '%b\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -sha256 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
leaf apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
leaf admin "/O=system:masters/CN=specpilot-e2e-admin" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
# Front proxy (aggregation layer): a separate CA whose client certificate the
# apiserver presents to aggregated API servers; components trust it through the
# extension-apiserver-authentication ConfigMap.
openssl genrsa -out front-proxy-ca.key 2048 2>/dev/null
openssl req -x509 -new -key front-proxy-ca.key -sha256 -days 30 -subj "/CN=specpilot-e2e-front-proxy-ca" \
  -out front-proxy-ca.crt 2>/dev/null
openssl genrsa -out front-proxy-client.key 2048 2>/dev/null
openssl req -new -key front-proxy-client.key -subj "/CN=front-proxy-client" -out front-proxy-client.csr 2>/dev/null
printf '%b\n' "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth" \
  >front-proxy-client.ext
openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key -CAcreateserial \
  -days 30 -sha256 -extfile front-proxy-client.ext -out front-proxy-client.crt 2>/dev/null
rm -f front-proxy-client.csr front-proxy-client.ext
openssl genrsa -out sa.key 2048 2>/dev/null
openssl pkey -in sa.key -pubout -out sa.pub
chmod 644 ca.crt apiserver.crt admin.crt front-proxy-ca.crt front-proxy-client.crt sa.pub
