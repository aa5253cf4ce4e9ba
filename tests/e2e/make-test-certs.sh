#!/usr/bin/env bash
# Makes throw-away certificates for the TLS tests in directory $1 (valid for 2 days):
#   ca.pem                     the cluster's CA
#   server.pem, server.key     the aggregator's certificate, for 127.0.0.1 and localhost
#   client.pem, client.key     an agent's certificate, signed by ca.pem
#   rogue-ca.pem, rogue.pem, rogue.key   a certificate from a CA the aggregator does not trust
set -euo pipefail
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # name
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=ncclwatch test $1"
}
leaf() {  # name ca subject extensions
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "$3"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
ca ca
ca rogue-ca
leaf server ca /CN=aggregator "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client ca /CN=agent-node-0 "extendedKeyUsage=clientAuth"
leaf rogue rogue-ca /CN=agent-intruder "extendedKeyUsage=clientAuth"
