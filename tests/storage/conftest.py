from tests.storage.zfs import make_pool, zfs_daemon  # noqa: F401 - fixtures
