-- A kelpie 0.1.0 database (schema by create_all, before migrations), with a few rows.
BEGIN TRANSACTION;
CREATE TABLE approvals (
	id VARCHAR NOT NULL, 
	session_id INTEGER NOT NULL, 
	turn_id VARCHAR NOT NULL, 
	tool_call_id VARCHAR NOT NULL, 
	tool VARCHAR NOT NULL, 
	plan_json VARCHAR NOT NULL, 
	reason VARCHAR NOT NULL, 
	role VARCHAR NOT NULL, 
	cluster VARCHAR NOT NULL, 
	channel_id VARCHAR NOT NULL, 
	thread_ts VARCHAR NOT NULL, 
	requested_by VARCHAR NOT NULL, 
	status VARCHAR NOT NULL, 
	decided_by VARCHAR, 
	decided_at DATETIME, 
	expires_at DATETIME NOT NULL, 
	card_ts VARCHAR, 
	outcome VARCHAR, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);
CREATE TABLE messages (
	id INTEGER NOT NULL, 
	session_id INTEGER NOT NULL, 
	turn_id VARCHAR NOT NULL, 
	role VARCHAR NOT NULL, 
	content VARCHAR, 
	tool_calls_json VARCHAR, 
	tool_call_id VARCHAR, 
	tool_name VARCHAR, 
	slack_user VARCHAR, 
	slack_ts VARCHAR, 
	complete BOOLEAN NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);
INSERT INTO "messages" VALUES(1,1,'turn1','user','why is checkout-api crashlooping?',NULL,NULL,NULL,'U0ALICE','1700000000.000100',1,'2026-11-30 10:00:00.000000');
INSERT INTO "messages" VALUES(2,1,'turn1','assistant','It runs out of memory (OOMKilled).',NULL,NULL,NULL,NULL,NULL,1,'2026-11-30 10:00:05.000000');
CREATE TABLE model_payloads (
	session_id INTEGER NOT NULL, 
	turn_id VARCHAR NOT NULL, 
	round_index INTEGER NOT NULL, 
	model VARCHAR NOT NULL, 
	payload_json VARCHAR NOT NULL, 
	masked_count INTEGER NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (session_id), 
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);
CREATE TABLE processed_events (
	event_id VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (event_id)
);
INSERT INTO "processed_events" VALUES('Ev0OLD00001','2026-11-30 10:00:00.000000');
CREATE TABLE sessions (
	id INTEGER NOT NULL, 
	session_key VARCHAR NOT NULL, 
	team_id VARCHAR NOT NULL, 
	channel_id VARCHAR NOT NULL, 
	thread_ts VARCHAR NOT NULL, 
	is_dm BOOLEAN NOT NULL, 
	role VARCHAR NOT NULL, 
	cluster VARCHAR NOT NULL, 
	namespace VARCHAR, 
	started_by VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "sessions" VALUES(1,'T0TEST:C0SHOP:1700000000.000100','T0TEST','C0SHOP','1700000000.000100',0,'viewer','prod','shop','U0ALICE','2026-11-30 10:00:00.000000');
CREATE TABLE tool_audit (
	id INTEGER NOT NULL, 
	session_id INTEGER NOT NULL, 
	turn_id VARCHAR NOT NULL, 
	tool_call_id VARCHAR NOT NULL, 
	tool VARCHAR NOT NULL, 
	arguments_json VARCHAR NOT NULL, 
	stage VARCHAR NOT NULL, 
	decision VARCHAR NOT NULL, 
	reason VARCHAR NOT NULL, 
	slack_user VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);
CREATE TABLE usage (
	id INTEGER NOT NULL, 
	session_id INTEGER NOT NULL, 
	turn_id VARCHAR NOT NULL, 
	round_index INTEGER NOT NULL, 
	model VARCHAR NOT NULL, 
	input_tokens INTEGER NOT NULL, 
	output_tokens INTEGER NOT NULL, 
	estimated BOOLEAN NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(session_id) REFERENCES sessions (id)
);
INSERT INTO "usage" VALUES(1,1,'turn1',0,'openai/test-model',120,12,0,'2026-11-30 10:00:05.000000');
CREATE TABLE write_audit (
	id INTEGER NOT NULL, 
	approval_id VARCHAR NOT NULL, 
	phase VARCHAR NOT NULL, 
	tool VARCHAR NOT NULL, 
	target VARCHAR NOT NULL, 
	target_uid VARCHAR NOT NULL, 
	requested_by VARCHAR NOT NULL, 
	approved_by VARCHAR NOT NULL, 
	preview VARCHAR NOT NULL, 
	result VARCHAR NOT NULL, 
	ok BOOLEAN NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(approval_id) REFERENCES approvals (id)
);
CREATE TABLE write_reservations (
	target VARCHAR NOT NULL, 
	approval_id VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (target)
);
CREATE UNIQUE INDEX ix_sessions_session_key ON sessions (session_key);
CREATE INDEX ix_messages_turn_id ON messages (turn_id);
CREATE INDEX ix_messages_session_id ON messages (session_id);
CREATE INDEX ix_usage_session_id ON usage (session_id);
CREATE INDEX ix_usage_turn_id ON usage (turn_id);
CREATE INDEX ix_tool_audit_turn_id ON tool_audit (turn_id);
CREATE INDEX ix_tool_audit_tool_call_id ON tool_audit (tool_call_id);
CREATE INDEX ix_tool_audit_session_id ON tool_audit (session_id);
CREATE INDEX ix_approvals_status ON approvals (status);
CREATE INDEX ix_approvals_session_id ON approvals (session_id);
CREATE INDEX ix_write_audit_approval_id ON write_audit (approval_id);
COMMIT;
