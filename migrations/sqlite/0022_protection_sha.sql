-- The commit a waiting deployment is of (GitHub's `deployment.sha`): it is
-- approved only while the pull request's head gatebot knows is that commit.
-- Empty: not known (a request stored before this column).
ALTER TABLE github_protection_requests ADD COLUMN sha TEXT NOT NULL DEFAULT '';
