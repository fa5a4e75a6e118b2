-- The fencing epoch: the newest leadership token any leader-only write has carried. A write with an older token
-- is refused inside its own transaction, which locks this row (SELECT … FOR UPDATE) before it checks it, so
-- leader-only writes of rival instances take turns. One row.
CREATE TABLE gateway_leader_epoch (
    id BIGINT PRIMARY KEY NOT NULL CHECK (id = 1),
    epoch BIGINT NOT NULL
);
INSERT INTO gateway_leader_epoch (id, epoch) VALUES (1, 0);
