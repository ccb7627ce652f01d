-- The offline slaves, by when they went offline (store.ListLostJobs: the slaves silent for the
-- job grace, whose jobs are given up). The leader asks at every housekeeping, once a second;
-- without the index Postgres read every slave's row to find the few offline ones, and a row is
-- wide (the inventory, the capacity and the last heartbeat's usage, 1.4 kB) and half of each
-- page is left free for the heartbeats' next versions (migration 0016): at 5,000 slaves 2,597
-- pages, 4 ms alone and 12–19 ms (mean) in B8x's passes. A heartbeat of an online slave sets
-- online and offline_since to the values they have, which changes neither (Postgres compares
-- the values), so its update stays HOT: only a slave going offline or coming back adds an entry.
CREATE INDEX slaves_offline_idx ON slaves (offline_since) WHERE NOT online;
