"""From Slack back into the eval suite: `kelpie eval export --thread LINK` turns a thread
kelpie answered (and people rated) into a case folder a person completes."""
