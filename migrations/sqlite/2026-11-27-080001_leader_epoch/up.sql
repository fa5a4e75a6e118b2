-- The fencing epoch: the newest leadership token any leader-only write has carried. A write with an older token
-- is refused inside its own transaction, so a deposed leader that wakes up (a pause, a partition) can neither
-- claim nor complete anything. One row.
CREATE TABLE gateway_leader_epoch (
    id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    epoch BIGINT NOT NULL
);
INSERT INTO gateway_leader_epoch (id, epoch) VALUES (1, 0);
