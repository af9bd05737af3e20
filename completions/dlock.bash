# bash completion for dlock(1)                                  -*- shell-script -*-
# Installed as share/bash-completion/completions/dlock; also works when sourced on its own.
# With the bash-completion package loaded, the words after "dlock run ... --" (or
# "dlock elect ... --") complete as that command's own arguments.

# Whether option $1 takes a value (so the next word is neither a subcommand nor an option).
_dlock_takes_value()
{
    case $1 in
        -u | --url | --password-file | --sentinel-password-file | --tls-ca | --tls-cert | --tls-key | --tls-server-name | \
            --prefix | --connect-timeout | -k | --key | -t | --ttl | -w | --wait | --timeout | \
            -E | --conflict-exit-code | -c | --command | --on-lost | --kill-after | --max-hold | \
            --limit | --wait-replicas | --wait-replicas-timeout | --token | --while-pid | \
            --parties | --count | --expire | --config | --metrics-dir | --min-hold | --lock-delay | \
            --note | --value | --format)
            return 0
            ;;
    esac
    return 1
}

# Sets words, cword and first (index in COMP_WORDS of each word's first piece) from COMP_WORDS,
# joining the pieces bash splits at "=" and ":" (--url=redis://h:6379 is one word here).
_dlock_reassemble()
{
    local line=${COMP_LINE-} i j=-1 w spaced
    words=() first=() cword=0
    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
        w=${COMP_WORDS[i]}
        spaced=0
        while [[ $line == [[:space:]]* ]]; do
            line=${line:1}
            spaced=1
        done
        line=${line:${#w}}
        if ((j >= 0 && !spaced)) && [[ $w == [=:]* || ${words[j]} == *[=:] ]]; then
            words[j]+=$w
        else
            words[++j]=$w
            first[j]=$i
        fi
        ((i == COMP_CWORD)) && cword=$j
    done
}

_dlock()
{
    local cur prev words first cword
    COMPREPLY=()
    _dlock_reassemble
    cur=${words[cword]}
    prev=
    ((cword > 0)) && prev=${words[cword - 1]}
    # "--opt=value": complete the value (readline replaces only the text after "=").
    if [[ $cur == --*=* ]]; then
        prev=${cur%%=*}
        cur=${cur#*=}
    fi

    local global_opts='-u --url --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-server-name
        --prefix --connect-timeout -v --verbose -q --quiet --syslog --config'

    # Find the subcommand, and for run and elect the "--" before the command.
    local i w sub= dashdash=0 skip=0
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        if ((skip)); then
            skip=0
            continue
        fi
        if [[ -n $sub && $w == -- ]]; then
            dashdash=$i
            break
        fi
        if [[ $w == -* ]]; then
            _dlock_takes_value "$w" && skip=1
            continue
        fi
        [[ -z $sub ]] && sub=$w
    done

    # After "dlock run ... --" (or elect's): the command and its arguments.
    if ((dashdash)); then
        if declare -F _command_offset >/dev/null; then
            _command_offset $((first[dashdash] + 1))
        elif ((cword == dashdash + 1)); then
            mapfile -t COMPREPLY < <(compgen -c -- "$cur")
        else
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        fi
        return 0
    fi

    # The value of an option.
    case $prev in
        --password-file | --sentinel-password-file | --tls-ca | --tls-cert | --tls-key | --config)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            return 0
            ;;
        --metrics-dir)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$cur")
            return 0
            ;;
        --format)
            mapfile -t COMPREPLY < <(compgen -W 'table json prometheus' -- "$cur")
            return 0
            ;;
        --on-lost)
            if [[ $sub == acquire ]]; then
                mapfile -t COMPREPLY < <(compgen -W 'signal:TERM signal:INT signal:USR1' -- "$cur")
            else
                mapfile -t COMPREPLY < <(compgen -W 'stop ignore' -- "$cur")
            fi
            return 0
            ;;
        -u | --url)
            if [[ $cur != *:* ]]; then
                compopt -o nospace 2>/dev/null
                mapfile -t COMPREPLY < <(compgen -W 'redis:// rediss:// unix:// redis-sentinel:// rediss-sentinel:// postgres:// postgresql:// mysql:// mariadb:// etcd:// etcds:// zk:// file://' -- "$cur")
            fi
            return 0
            ;;
        --tls-server-name)
            mapfile -t COMPREPLY < <(compgen -A hostname -- "$cur")
            return 0
            ;;
        -c | --command)
            mapfile -t COMPREPLY < <(compgen -c -- "$cur")
            return 0
            ;;
        --prefix | --connect-timeout | -k | --key | -t | --ttl | -w | --wait | --timeout | \
            -E | --conflict-exit-code | --kill-after | --max-hold | --limit | --wait-replicas | \
            --wait-replicas-timeout | --token | --while-pid | --parties | --count | --expire | \
            --min-hold | --lock-delay | --note | --value)
            return 0 # free text: nothing to offer
            ;;
    esac

    local opts
    case $sub in
        '')
            if [[ $cur == -* ]]; then
                opts="-h --help --version $global_opts"
            else
                opts='run status list acquire renew release wait barrier latch elect leader history'
            fi
            mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
            return 0
            ;;
        run)
            opts='-h --help -k --key -t --ttl -w --wait --timeout -n --no-wait -x --exclusive
                -s --shared --limit --fair -E --conflict-exit-code --wait-replicas
                --wait-replicas-timeout -c --command --on-lost --kill-after --max-hold
                --export-password --record-command --metrics-dir --min-hold --lock-delay
                --replace --supersede --note'
            ;;
        elect)
            opts='-h --help -k --key -t --ttl -w --wait --timeout -n --no-wait
                -E --conflict-exit-code --wait-replicas
                --wait-replicas-timeout -c --command --on-lost --kill-after --max-hold
                --export-password --record-command --metrics-dir --min-hold --lock-delay
                --replace --supersede --note --value --keep-campaigning'
            ;;
        status)
            opts='-h --help --json'
            ;;
        list)
            opts='-h --help --json --format'
            ;;
        leader)
            opts='-h --help --json --watch'
            ;;
        history)
            opts='-h --help --json --limit'
            ;;
        acquire)
            opts='-h --help -k --key -t --ttl -w --wait --timeout -n --no-wait -x --exclusive
                -s --shared --limit --fair -E --conflict-exit-code --wait-replicas
                --wait-replicas-timeout --json --keep --while-pid --max-hold --on-lost
                --min-hold --lock-delay --replace --supersede --note'
            ;;
        renew)
            opts='-h --help -k --key --token -t --ttl --wait-replicas --wait-replicas-timeout'
            ;;
        release)
            opts='-h --help -k --key --token --force'
            ;;
        wait)
            opts='-h --help -k --key -w --wait --timeout -E --conflict-exit-code'
            ;;
        barrier)
            opts='-h --help -k --key --parties -w --wait --timeout -E --conflict-exit-code'
            ;;
        latch)
            opts='-h --help -k --key --count --down -w --wait --expire -E --conflict-exit-code --json'
            ;;
        *)
            return 0
            ;;
    esac
    # A positional (a lock name, a pattern) has nothing to offer; options do. Global options
    # are accepted after the subcommand as well.
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$opts $global_opts" -- "$cur")
    fi
    return 0
} &&
    complete -F _dlock dlock

# ex: filetype=sh
