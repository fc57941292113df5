#!/bin/sh
# collectd exec program (runs unprivileged): days until the certificate the edge serves for each name
# expires, as the edge serves it (TLS with SNI to the published HTTPS port; no key or store is read).
# Usage: cert-expiry <edge address> <https port> <name>...
# Sends PUTVAL "<host>/certs-<name>/gauge-days_left"; a name whose certificate cannot be fetched sends
# nothing, so its series goes stale and the alert's no-data state shows it.
address="$1"
port="$2"
shift 2
host="${COLLECTD_HOSTNAME:-$(hostname)}"
interval="${COLLECTD_INTERVAL:-60}"
interval="${interval%%.*}"
while :; do
    now=$(date +%s)
    for name in "$@"; do
        end=$(openssl s_client -connect "$address:$port" -servername "$name" </dev/null 2>/dev/null \
            | openssl x509 -noout -enddate 2>/dev/null | sed 's/^notAfter=//')
        [ -n "$end" ] || continue
        end=$(date -d "$end" +%s 2>/dev/null) || continue
        days=$(awk -v e="$end" -v n="$now" 'BEGIN { printf "%.2f", (e - n) / 86400 }')
        echo "PUTVAL \"$host/certs-$name/gauge-days_left\" interval=$interval N:$days"
    done
    sleep "$interval"
done
