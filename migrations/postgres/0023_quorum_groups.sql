-- Groups that must be among a gate's approvers (`[[approvals]] include`):
-- the groups an approving gate collects for (`acme/sre=1 S0SRE=2`), and the
-- groups each voter was found in when they approved (`acme/sre sre`).
-- Empty: none (a gate or vote from before groups).
ALTER TABLE gates ADD COLUMN must_include TEXT NOT NULL DEFAULT '';
ALTER TABLE votes ADD COLUMN member_of TEXT NOT NULL DEFAULT '';
