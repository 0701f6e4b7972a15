//! brokerd: checks each tool call against the owner's grant, runs it in a fresh sandbox and
//! answers with the output labelled by its grant. See DESIGN.md "Life of a call".
