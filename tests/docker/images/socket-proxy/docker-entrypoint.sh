#!/bin/sh
# After Tecnativa/docker-socket-proxy v0.3.0 docker-entrypoint.sh (test stand-in): the bind address comes
# from DISABLE_IPV6 (1/true/yes: ":2375", else "[::]:2375 v4v6"), then haproxy runs in the foreground.
set -e
case "$(echo "$DISABLE_IPV6" | tr '[:upper:]' '[:lower:]')" in
    1|true|yes) BIND_CONFIG=":2375" ;;
    *) BIND_CONFIG="[::]:2375 v4v6" ;;
esac
sed "s/\${BIND_CONFIG}/$BIND_CONFIG/g" /usr/local/etc/haproxy/haproxy.cfg.template > /usr/local/etc/haproxy/haproxy.cfg
if [ "${1#-}" != "$1" ]; then set -- haproxy "$@"; fi
if [ "$1" = haproxy ]; then shift; set -- haproxy -W -db "$@"; fi
exec "$@"
