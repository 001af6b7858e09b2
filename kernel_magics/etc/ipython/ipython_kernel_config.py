# Installed by Schedulearn into {sys.prefix}/etc/ipython/: every IPython kernel of this
# environment loads the %%schedulearn magics. It appends (it does not replace): a user's own
# `c.InteractiveShellApp.extensions.append(...)` keeps working; a plain assignment
# `c.InteractiveShellApp.extensions = [...]` in a profile replaces this list (add
# "schedulearn_magics" there). A failed import only logs a warning; the kernel starts anyway.
c = get_config()  # noqa: F821
c.InteractiveShellApp.extensions.append("schedulearn_magics")
