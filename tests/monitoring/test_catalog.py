"""The metric catalog: exact Graphite paths for the example, escaping, schemas, whisper budget."""

from __future__ import annotations

import itertools
import re

from homelab.monitoring.series import Retention, escape, retentions, whisper_size


def test_escape_follows_write_graphite() -> None:
    assert escape("CPU Temp processor (3.1)") == "CPU_Temp_processor__3_1_"
    assert escape("nas.home.lan") == "nas_home_lan"
    assert escape('a\tb"c\\d:e!f,g/h') == "a_b_c_d_e_f_g_h"
    assert escape("demand_data-hit") == "demand_data-hit"


def test_example_paths(example_catalog) -> None:
    paths = set(example_catalog.paths())
    expected = {
        "collectd.nas.ipmi.temperature-CPU_Temp_processor__3_1_",
        "collectd.nas.ipmi.temperature-MB_Temp_system_board__7_1_",
        "collectd.nas.ipmi.fanspeed-CPU_FAN1_fan_cooling__29_1_",
        "collectd.nas.ipmi.fanspeed-REAR_FAN1_fan_cooling__29_1_",
        "collectd.nas.ipmi.voltage-3_3V_power_supply__10_1_",
        "collectd.nas.sensors-coretemp-isa-0000.temperature-temp1",
        "collectd.nas.thermal-thermal_zone0.temperature",
        "collectd.nas.smart-sda.smart_temperature",
        "collectd.nas.smart-sdf.smart_badsectors",
        "collectd.nas.smart-sdc.smart_attribute-reallocated-sector-count.pretty",
        "collectd.nas.smart-sdc.smart_attribute-attribute-188.pretty",
        "collectd.nas.smart-sdc.smart_attribute-offline-uncorrectable.pretty",
        "collectd.nas.disk-sda.disk_octets.read",
        "collectd.nas.disk-sda.disk_octets.write",
        "collectd.nas.disk-sdb.disk_io_time.io_time",
        "collectd.nas.df-tank-homelab-plex-media.df_complex-used",
        "collectd.nas.df-tank-homelab-plex-media.percent_bytes-used",
        "collectd.nas.zfs_arc.cache_size-arc",
        "collectd.nas.zfs_arc.cache_ratio-arc",
        "collectd.nas.zfs_arc.cache_result-demand_data-hit",
        "collectd.nas.cpu.percent-idle",
        "collectd.nas.memory.memory-used",
        "collectd.nas.load.load.shortterm",
        "collectd.nas.interface-eno1.if_octets.rx",
        "collectd.nas.tcpconns-443-local.tcp_connections-ESTABLISHED",
        "collectd.nas.uptime.uptime",
        "collectd.nas.backup-offsite.timestamp-last_success",
    }
    assert expected <= paths
    assert len(paths) == len(example_catalog.series), "duplicate series"
    # every path is a valid graphite name: dot-separated, no empty or forbidden component
    for path in paths:
        assert all(re.fullmatch(r"[A-Za-z0-9_\-]+", part) for part in path.split(".")), path
    # single-value types carry no data source suffix
    assert "collectd.nas.smart-sda.smart_temperature.value" not in paths


def test_identifiers_are_collectd_identifiers(example_catalog) -> None:
    cpu = example_catalog.one(plugin="ipmi", type_instance="CPU Temp processor (3.1)")
    assert cpu.identifier == "nas/ipmi/temperature-CPU Temp processor (3.1)"
    assert cpu.unit == "celsius" and cpu.aggregation == "max"


def test_retentions_five_years_finest_is_interval() -> None:
    assert ",".join(map(str, retentions(10))) == "10s:1d,1m:30d,10m:1y,1h:5y"
    assert ",".join(map(str, retentions(60))) == "1m:30d,10m:1y,1h:5y"
    for interval in (1, 7, 10, 15, 45, 60, 90, 300):
        archives = retentions(interval)
        assert archives[0].precision == interval
        for finer, coarser in itertools.pairwise(archives):
            assert coarser.precision % finer.precision == 0
            assert coarser.seconds > finer.seconds
        assert archives[-1].seconds >= 5 * 365 * 86400 - archives[-1].precision


def test_storage_schemas_match_catalog(example_catalog) -> None:
    schemas = example_catalog.storage_schemas()
    for path in example_catalog.paths():
        first = next(r for _n, pattern, r in schemas if re.search(pattern, path))
        assert first == "10s:1d,1m:30d,10m:1y,1h:5y"


def test_aggregation_rules_give_each_series_its_method(example_catalog) -> None:
    for s in example_catalog.series:
        assert example_catalog.aggregation_for(s.path) == s.aggregation, s.path
    assert example_catalog.aggregation_for("collectd.nas.ipmi.temperature-CPU_Temp_processor__3_1_") == "max"
    assert example_catalog.aggregation_for("collectd.nas.ipmi.fanspeed-CPU_FAN1_fan_cooling__29_1_") == "min"
    assert example_catalog.aggregation_for("collectd.nas.cpu.percent-idle") == "average"


def test_whisper_budget(example_catalog) -> None:
    # the reference numbers: 148,200 points = 1.70 MiB per metric
    assert whisper_size(list(retentions(10))) == 16 + 12 * 4 + 12 * 148_200
    assert whisper_size([Retention(60, 1440)]) == 16 + 12 + 12 * 1440
    per = example_catalog.whisper_bytes_per_series()
    assert example_catalog.whisper_bytes() == per * len(example_catalog.series)
    assert 100 < len(example_catalog.series) < 1000


def test_entity_ids_are_openipmis() -> None:
    """IPMI 2.0 table 43-13 under OpenIPMI's names: 4 disk, 8 memory module, 32 memory device."""
    from homelab.profiles import ENTITY_IDS

    assert ENTITY_IDS["disk"] == 4 and ENTITY_IDS["memory_module"] == 8 and ENTITY_IDS["memory_device"] == 32
    assert ENTITY_IDS["processor"] == 3 and ENTITY_IDS["fan_cooling"] == 29 and ENTITY_IDS["system_board"] == 7
