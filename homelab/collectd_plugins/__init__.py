"""collectd python plugins: files copied into the collectd image (homelab/render/collectd.py) and run there by
collectd's python plugin, standalone (they import nothing of homelab). The pure layers never import them; they
name the plugins' series by their own constants, which tests hold equal to these files'."""
