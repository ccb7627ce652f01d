-- SSH into jobs (issue 12): each slave's SSH endpoint from its latest registration, as users
-- reach it, with its host key, which the master publishes and the job JSON points at. An
-- empty host means the slave serves no SSH.
ALTER TABLE slaves
    ADD COLUMN ssh_host     TEXT NOT NULL DEFAULT '',
    ADD COLUMN ssh_port     INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN ssh_host_key TEXT NOT NULL DEFAULT '';
