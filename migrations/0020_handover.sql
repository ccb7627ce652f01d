-- When an assigned job was first handed to its slave (a long poll of the slave returned it;
-- issue 16). The assigned lease runs from then, not from the assignment: a master too loaded
-- to answer its slaves' polls in time (B8x's fill: 33,000 jobs assigned in one pass, the polls
-- shed) queued again jobs that no slave had been given, assigned them again, and the churn kept
-- it overloaded. A job never handed over has a longer lease (store.Leases.HandOver). NULL
-- while the job is not ASSIGNED, or not handed over yet.
ALTER TABLE jobs ADD COLUMN handed_over_at TIMESTAMPTZ;
