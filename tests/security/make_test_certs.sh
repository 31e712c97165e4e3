#!/bin/sh
# Test certificates (made fresh for each run, never kept in the repository): a CA, two
# server certificates it signed (for localhost and 127.0.0.1; the second stands for a
# rotated one), a client certificate it signed, and a client certificate of another CA
# that an mTLS server must refuse. EC P-256 keys: quick to make.
#
#   make_test_certs.sh OUTDIR
set -eu
out=$1
mkdir -p "$out"
cd "$out"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # ca NAME CN
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 -sha256 -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # leaf NAME CN CA EXT
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
    -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
server_ext='subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth'
client_ext='extendedKeyUsage=clientAuth'
ca ca "gemmd test CA"
ca other_ca "another CA"
leaf server gemmd-test-server-1 ca "$server_ext"
leaf server2 gemmd-test-server-2 ca "$server_ext"
leaf client gemmd-test-client ca "$client_ext"
leaf stranger gemmd-test-stranger other_ca "$client_ext"
