"""Memories that cite code, checked against the code before they are given to an agent:
what is written (`anchors`), what git reads (`code`), the check (`checks`), the step between
ranking and showing memories (`gate`), the tables (`store`), the API process's view of the
code (`code_views`), the host API's store (`hosted`), auto memories' citations
(`extracted`) and revalidation (`revalidation`)."""
