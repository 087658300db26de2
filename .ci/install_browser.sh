#!/usr/bin/env bash
# Installs what tests/playground/test_browser.py needs when it is missing: Debian's chromium and chromium-driver, and
# fonts-noto-cjk (Hangul glyphs in the page and its screenshot). Safe to run again: it installs nothing when
# all three are there. It never fails the CI run: when they cannot be installed it says so loudly, and the
# browser test then skips with a message just as loud.
set -u

need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
dpkg -s fonts-noto-cjk >/dev/null 2>&1 || need+=(fonts-noto-cjk)

if [ ${#need[@]} -eq 0 ]; then
    echo "install_browser: chromium, chromium-driver and fonts-noto-cjk are installed"
    exit 0
fi

loud() {
    {
        echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
        echo "!!! install_browser: $*"
        echo "!!! tests/playground/test_browser.py (the real-browser test of the playground) will be SKIPPED"
        echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    } >&2
    exit 0
}

command -v apt-get >/dev/null 2>&1 || loud "cannot install ${need[*]}: this system has no apt-get"
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        loud "cannot install ${need[*]}: not root, and no password-less sudo"
    fi
fi

echo "install_browser: installing ${need[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq || loud "apt-get update failed (no network or no package mirror?)"
"${SUDO[@]}" apt-get install -y -qq "${need[@]}" >/dev/null || loud "apt-get install ${need[*]} failed"
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || loud "apt-get ran but /usr/bin/chromium or /usr/bin/chromedriver is still missing"
echo "install_browser: done"
