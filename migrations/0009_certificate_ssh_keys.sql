-- SSH into jobs (issue 12): a user's login certificate key also opens SSH into his jobs, as
-- with imec's client (`ssh -i <login pem>`). The master keeps the SSH fingerprint of each user
-- certificate's public key; certificates issued before this column have none (NULL) and are
-- not accepted for SSH until the user fetches a new one.
ALTER TABLE certificates ADD COLUMN ssh_fingerprint TEXT;
CREATE INDEX certificates_ssh_fingerprint_idx ON certificates (ssh_fingerprint) WHERE ssh_fingerprint IS NOT NULL;
