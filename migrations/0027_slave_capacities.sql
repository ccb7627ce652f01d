-- The most each registered slave offers, as three numbers written when it registers
-- (store.RegisterSlave): its GPUs (its inventory's or its capacity's, the larger), its CPUs and
-- its memory. Every submit is checked against the largest of all (store.LargestSlave: a job
-- asking for more could never run), looked at every 15 s by every master. Computed from the
-- slaves' rows, that look read each slave's wide row and its inventory's JSON: 58 ms at 5,000
-- slaves on a quiet machine (B8x's database), 86–111 ms in B8x, and the submits on that master
-- waited for it. A slave's row is also rewritten by each heartbeat, a row here only by a
-- registration. A slave that joined but never registered has none (as before: not counted).
CREATE TABLE slave_capacities (
    slave_id    BIGINT PRIMARY KEY REFERENCES slaves(id) ON DELETE CASCADE,
    gpus        INTEGER NOT NULL,
    cpus        BIGINT NOT NULL,
    memory_mib  BIGINT NOT NULL
);

INSERT INTO slave_capacities (slave_id, gpus, cpus, memory_mib)
SELECT id,
    GREATEST(CASE WHEN jsonb_typeof(inventory->'gpus') = 'array' THEN jsonb_array_length(inventory->'gpus') ELSE 0 END,
             CASE WHEN jsonb_typeof(capacity_gpus) = 'array' THEN jsonb_array_length(capacity_gpus) ELSE 0 END),
    COALESCE(CASE WHEN jsonb_typeof(inventory->'cpus') = 'number' THEN (inventory->>'cpus')::numeric END, 0)::bigint,
    COALESCE(CASE WHEN jsonb_typeof(inventory->'memoryMiB') = 'number' THEN (inventory->>'memoryMiB')::numeric END, 0)::bigint
FROM slaves WHERE instance_id <> '';
