# fish completion for dlock(1). Installed as share/fish/vendor_completions.d/dlock.fish.

# Prints the subcommand on the command line (skipping global options and their values);
# fails if there is none yet.
function __fish_dlock_subcommand
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l skip 0
    for t in $tokens
        if test $skip -eq 1
            set skip 0
            continue
        end
        switch $t
            case -u --url --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-server-name --prefix --connect-timeout --config
                set skip 1
            case '-*'
            case '*'
                echo $t
                return 0
        end
    end
    return 1
end

# Whether the subcommand is one of the arguments, and "--" (the start of run's or elect's
# command) has not been typed yet.
function __fish_dlock_using
    set -l sub (__fish_dlock_subcommand)
    or return 1
    contains -- $sub $argv
    or return 1
    not contains -- -- (commandline -opc)
end

complete -c dlock -f

# Global options (accepted before or after the subcommand).
complete -c dlock -n 'not __fish_dlock_subcommand' -s h -l help -d 'Print help and exit'
complete -c dlock -n 'not __fish_dlock_subcommand' -l version -d 'Print version and exit'
set -l __dlock_global 'not contains -- -- (commandline -opc)'
complete -c dlock -n $__dlock_global -s u -l url -x -a 'redis:// rediss:// unix:// redis-sentinel:// rediss-sentinel:// postgres:// postgresql:// mysql:// mariadb:// etcd:// etcds:// zk:// file://' -d 'Lock store URL'
complete -c dlock -n $__dlock_global -l password-file -r -F -d 'Read the Redis password from FILE'
complete -c dlock -n $__dlock_global -l sentinel-password-file -r -F -d "Read the Sentinels' password from FILE"
complete -c dlock -n $__dlock_global -l tls-ca -r -F -d 'CA bundle for rediss://'
complete -c dlock -n $__dlock_global -l tls-cert -r -F -d 'Client certificate for rediss://'
complete -c dlock -n $__dlock_global -l tls-key -r -F -d 'Client key for rediss://'
complete -c dlock -n $__dlock_global -l tls-server-name -x -a '(__fish_print_hostnames)' -d 'Expected server name for rediss://'
complete -c dlock -n $__dlock_global -l prefix -x -d 'Namespace of every key dlock writes'
complete -c dlock -n $__dlock_global -l connect-timeout -x -d 'Per connection attempt and request'
complete -c dlock -n $__dlock_global -s v -l verbose -d 'More diagnostics on stderr'
complete -c dlock -n $__dlock_global -s q -l quiet -d 'No diagnostics on stderr except errors'
complete -c dlock -n $__dlock_global -l syslog -d 'Also log acquisitions, skips, losses and releases to syslog'
complete -c dlock -n $__dlock_global -l config -r -F -d 'Read defaults from FILE only'

# Subcommands.
complete -c dlock -n 'not __fish_dlock_subcommand' -a run -d 'Run a command while holding the lock'
complete -c dlock -n 'not __fish_dlock_subcommand' -a status -d 'Show who holds a lock'
complete -c dlock -n 'not __fish_dlock_subcommand' -a list -d 'List held locks under the prefix'
complete -c dlock -n 'not __fish_dlock_subcommand' -a acquire -d 'Take a lock for several steps; print its token'
complete -c dlock -n 'not __fish_dlock_subcommand' -a renew -d 'Extend a lease held by a token'
complete -c dlock -n 'not __fish_dlock_subcommand' -a release -d 'Release a lock by token, or --force'
complete -c dlock -n 'not __fish_dlock_subcommand' -a wait -d 'Block until a lock is free; take nothing'
complete -c dlock -n 'not __fish_dlock_subcommand' -a barrier -d 'Block until N callers have arrived'
complete -c dlock -n 'not __fish_dlock_subcommand' -a latch -d 'Set, count down or wait for a count-down latch'
complete -c dlock -n 'not __fish_dlock_subcommand' -a elect -d 'Campaign for leadership; run a command while leader'
complete -c dlock -n 'not __fish_dlock_subcommand' -a leader -d 'Show who leads'
complete -c dlock -n 'not __fish_dlock_subcommand' -a history -d "Show a lock's last events, newest first"

# Options shared by several subcommands.
complete -c dlock -n '__fish_dlock_using run status list acquire renew release wait barrier latch elect leader history' -s h -l help -d 'Print help and exit'
complete -c dlock -n '__fish_dlock_using run elect acquire renew release' -s k -l key -x -d 'Lock name (repeat it for several)'
complete -c dlock -n '__fish_dlock_using wait barrier latch' -s k -l key -x -d 'Lock, barrier or latch name'
complete -c dlock -n '__fish_dlock_using run elect acquire' -s t -l ttl -x -d 'Lease length (min 1s)'
complete -c dlock -n '__fish_dlock_using run elect acquire wait barrier' -s w -l wait -x -d 'Give up after waiting D'
complete -c dlock -n '__fish_dlock_using run elect acquire wait barrier' -l timeout -x -d 'Give up after waiting D (flock name of --wait)'
complete -c dlock -n '__fish_dlock_using run elect acquire' -s n -l no-wait -d 'Give up at once if the lock is held'
complete -c dlock -n '__fish_dlock_using run acquire' -s x -l exclusive -d 'Exclusive lock (the default; for flock compatibility)'
complete -c dlock -n '__fish_dlock_using run acquire' -s s -l shared -d 'Shared (read) lock: many shared holders, or one exclusive'
complete -c dlock -n '__fish_dlock_using run acquire' -l limit -x -d 'Semaphore: up to N holders at once (same N for all)'
complete -c dlock -n '__fish_dlock_using run acquire' -l fair -d 'First come, first served among waiters (exclusive lock only)'
complete -c dlock -n '__fish_dlock_using run elect acquire' -s E -l conflict-exit-code -x -d 'Exit status when the lock is not obtained'
complete -c dlock -n '__fish_dlock_using wait barrier latch' -s E -l conflict-exit-code -x -d 'Exit status when --wait runs out'
complete -c dlock -n '__fish_dlock_using run elect acquire renew' -l wait-replicas -x -d 'Count the lock only once N replicas have it (Redis WAIT)'
complete -c dlock -n '__fish_dlock_using run elect acquire renew' -l wait-replicas-timeout -x -d 'How long to wait for the replicas (default ttl/10)'
complete -c dlock -n '__fish_dlock_using status list acquire latch history' -l json -d 'One JSON document'
complete -c dlock -n '__fish_dlock_using history' -l limit -x -d 'Show the newest N events (default 20, at most 100)'
complete -c dlock -n '__fish_dlock_using list' -l format -x -a 'table json prometheus' -d 'Output format (prometheus: for node_exporter)'
complete -c dlock -n '__fish_dlock_using leader' -l json -d 'One JSON document (one per change with --watch)'
complete -c dlock -n '__fish_dlock_using run elect acquire' -l min-hold -x -d 'Keep the lock taken at least D from acquisition (once per period)'
complete -c dlock -n '__fish_dlock_using run elect acquire' -l lock-delay -x -d 'If this lease ends without a release, keep the lock closed D more'
complete -c dlock -n '__fish_dlock_using run elect acquire' -l replace -d 'Take over: ask the holder to stop and release'
complete -c dlock -n '__fish_dlock_using run elect acquire' -l supersede -d 'Newest waiter wins: older --supersede waiters give up'
complete -c dlock -n '__fish_dlock_using run elect acquire' -l note -x -d 'Why it is held (shown by status, list and conflicts)'

# run (and elect)
complete -c dlock -n '__fish_dlock_using run elect' -s c -l command -x -a '(__fish_complete_command)' -d 'Run STRING with /bin/sh -c'
complete -c dlock -n '__fish_dlock_using run elect' -l on-lost -x -a 'stop ignore' -d 'When the lease is lost: stop or ignore'
complete -c dlock -n '__fish_dlock_using run elect' -l kill-after -x -d 'Grace between SIGTERM and SIGKILL'
complete -c dlock -n '__fish_dlock_using run elect' -l max-hold -x -d 'Stop the command after D (exit 124)'
complete -c dlock -n '__fish_dlock_using acquire' -l keep -d 'A detached holder renews the lease until release or the script ends'
complete -c dlock -n '__fish_dlock_using acquire' -l while-pid -x -a '(__fish_complete_pids)' -d 'With --keep: hold while process PID lives'
complete -c dlock -n '__fish_dlock_using acquire' -l max-hold -x -d 'With --keep: release after D'
complete -c dlock -n '__fish_dlock_using acquire' -l on-lost -x -a 'signal:TERM signal:INT signal:USR1' -d 'With --keep: signal the script if the lease is lost'
complete -c dlock -n '__fish_dlock_using run elect' -l metrics-dir -x -a '(__fish_complete_directories)' -d 'Write a Prometheus text file per key there'
complete -c dlock -n '__fish_dlock_using run elect' -l export-password -d 'Let the command see DLOCK_PASSWORD and a password in DLOCK_URL'
complete -c dlock -n '__fish_dlock_using run elect' -l record-command -d 'Record the whole command line for status and list'

# elect (besides run's options) and leader
complete -c dlock -n '__fish_dlock_using elect' -l value -x -d "What the leader proclaims, shown by 'dlock leader'"
complete -c dlock -n '__fish_dlock_using elect' -l keep-campaigning -d 'After the command exits or leadership is lost, campaign again'
complete -c dlock -n '__fish_dlock_using leader' -l watch -d 'Print a line at each change of leader, until a signal'

# After "--": the command, then its own arguments (completed as that command would be).
function __fish_dlock_after_dashdash
    set -l tokens (commandline -opc)
    contains -- "$(__fish_dlock_subcommand)" run elect
    and contains -- -- $tokens
end
function __fish_dlock_complete_command
    set -l tokens (commandline -opc)
    set -l i (contains -i -- -- $tokens)
    set -l command $tokens[(math $i + 1)..-1]
    if test (count $command) -eq 0
        complete -C "$(commandline -ct)"
    else
        complete -C "$(string join ' ' -- (string escape -- $command)) $(commandline -ct)"
    end
end
complete -c dlock -n __fish_dlock_after_dashdash -a '(__fish_dlock_complete_command)'

# renew and release
complete -c dlock -n '__fish_dlock_using renew release' -l token -x -d 'The token acquire printed'
complete -c dlock -n '__fish_dlock_using renew' -s t -l ttl -x -d 'New lease length'
complete -c dlock -n '__fish_dlock_using release' -l force -d 'Release whoever holds it'

# wait, barrier, latch
complete -c dlock -n '__fish_dlock_using barrier' -l parties -x -d 'How many callers make the barrier trip (same N for all)'
complete -c dlock -n '__fish_dlock_using latch' -l count -x -d 'Set the latch to N (again)'
complete -c dlock -n '__fish_dlock_using latch' -l down -d 'Count the latch down by one'
complete -c dlock -n '__fish_dlock_using latch' -s w -l wait -d 'Block until the count is zero; give up after D if given'
complete -c dlock -n '__fish_dlock_using latch' -l expire -x -d 'With --count: delete the latch after D (default 24h)'
