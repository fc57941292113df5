# Sourced by the faithful stand-in (images/faithful/standin, at /.standin/ops.sh) and by
# tests/unit/test_startup_facts.py. Needs B (a busybox) and name (the service's name).
# Each start-up operation of the image's facts (homelab/images/facts/<image>.yaml `startup`), baked by
# standins.startup_script into /.standin/startup as `op DO WHO ONLY_AS_ROOT UNLESS MAY_FAIL PATH OWNER MODE
# RECURSIVE` lines and run in order when this runs as the image's entrypoint: as the uid the container
# started as, or (WHO=drop, started as root) as the uid the entrypoint drops to, on the real mounted
# folders, so it fails where the image's own script fails. Unit tests only: STANDIN_ROOT prefixes the
# paths, STANDIN_TRACE gets a line per operation done.
OP_mkdir='$B mkdir -p "$1"'
OP_chmod='$B chmod "$3" "$1"'
OP_chown='$B chown $4 "$2" "$1"'
OP_walk_chown='$B find "$1" ! -user "${2%%:*}" -exec $B chown "$2" {} +'  # redis, postgres: find ... -exec chown
OP_write='echo "written by the $0 stand-in" >> "$1" && { [ -z "$2" ] || $B chown "$2" "$1"; }'
OP_read='$B ls -A "$1" > /dev/null'
op() {
  [ "$3" = 1 ] && [ "$($B id -u)" != 0 ] && return 0
  [ -n "$4" ] && [ -e "$STANDIN_ROOT$4" ] && return 0
  eval "script=\$OP_$(echo "$1" | $B tr - _)"
  recursive=; [ "$9" = 1 ] && recursive=-R
  if [ "$2" = drop ] && [ -n "$STANDIN_DROP_TO" ] && [ "$($B id -u)" = 0 ]; then
    $B su -s /.standin/sh app -c "B=$B; $script" "$name" "$STANDIN_ROOT$6" "$7" "$8" "$recursive"
  else
    B=$B $B sh -c "$script" "$name" "$STANDIN_ROOT$6" "$7" "$8" "$recursive"
  fi && { [ -z "$STANDIN_TRACE" ] || echo "$1 $6" >> "$STANDIN_TRACE"; return 0; }
  [ "$5" = 1 ] && return 0
  echo "$name stand-in: start-up operation '$1 $6' ($2 uid) failed, as the image's start-up fails" >&2
  exit 1
}
