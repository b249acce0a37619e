#!/usr/bin/env bash
# compose-certs.sh DIR: the secrets of deploy/compose.yaml's cluster, made
# with cairn cert into DIR (deploy/certs) unless it holds them already: the
# cluster's CA, a certificate for each node cairn-0..2 (valid for its name,
# localhost and 127.0.0.1, where the host's clients and the containers'
# health checks reach it), the gossip key and user admin's password.
#
# The keys are made readable by the containers' user (65532), which does
# not own them on the host: this is a local cluster's setup. A shared host
# gives the files to that user instead.
set -euo pipefail
BIN=${BIN:-bin/cairn}
DIR=${1:?usage: compose-certs.sh DIR}
if [ -f "$DIR/ca.pem" ]; then
  exit 0
fi
mkdir -p "$DIR"
"$BIN" cert ca --out "$DIR"
for i in 0 1 2; do
  "$BIN" cert node --ca "$DIR" --node-id "cairn-$i" --hosts "cairn-$i,localhost,127.0.0.1" --out "$DIR"
done
"$BIN" cert gossip-key > "$DIR/gossip-key"
# A password of 44 random characters: the gossip key's form will do.
"$BIN" cert gossip-key > "$DIR/admin-password"
# The CA's key stays here: whoever holds it makes identities.
chmod 0644 "$DIR"/cairn-*-key.pem "$DIR/gossip-key" "$DIR/admin-password"
echo "compose-certs: wrote $DIR (user admin's password is in $DIR/admin-password)"
