#!/bin/sh
# Renders coturn's config from the committed template plus what is per deployment, then runs coturn.
# The shared secret comes from the environment (a Kubernetes Secret or compose's .env) and is written
# only to a memory-backed folder, never to the command line (where `ps` on the node would show it).
set -eu
: "${TURN_SECRET:?TURN_SECRET must hold the TURN shared secret (the daemon's --turn-secret)}"
: "${TURN_REALM:?TURN_REALM must name the realm, e.g. the public domain}"
template=${TURN_TEMPLATE:-/etc/coturn-template/turnserver.conf}
conf_dir=${TURN_CONF_DIR:-/run/coturn}
conf=$conf_dir/turnserver.conf
umask 077
mkdir -p "$conf_dir"
cp "$template" "$conf"
printf 'realm=%s\n' "$TURN_REALM" >> "$conf"
printf 'static-auth-secret=%s\n' "$TURN_SECRET" >> "$conf"
if [ -n "${TURN_ALLOWED_PEER_IP:-}" ]; then
    printf 'allowed-peer-ip=%s\n' "$TURN_ALLOWED_PEER_IP" >> "$conf"
fi
# behind 1:1 NAT the relay addresses must be announced as the public address: external-ip=PUBLIC/PRIVATE
if [ -n "${TURN_EXTERNAL_IP:-}" ]; then
    if [ -n "${NODE_IP:-}" ]; then
        printf 'external-ip=%s/%s\n' "$TURN_EXTERNAL_IP" "$NODE_IP" >> "$conf"
    else
        printf 'external-ip=%s\n' "$TURN_EXTERNAL_IP" >> "$conf"
    fi
fi
# extra arguments go to coturn (they override the file)
exec turnserver -c "$conf" "$@"
