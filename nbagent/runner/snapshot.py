"""Old path of ``nbagent.snapshot`` (copy-on-write snapshots are a utility now)."""

from nbagent.snapshot import (
    AppendLog,
    OneChange,
    _Saved,
    plain_snapshot,
    restore_dict,
    snapshot_dict,
)

__all__ = ["AppendLog", "OneChange", "plain_snapshot", "restore_dict", "snapshot_dict"]
