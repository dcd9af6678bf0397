"""Agent node: planners, toolkit, memory and transcripts (see ARCHITECTURE.md, "The agent node")."""
